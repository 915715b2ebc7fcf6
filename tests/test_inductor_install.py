"""Installing the toggle: the config entry, the wrapper registration, the capture hooks."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from torch._inductor import config  # noqa: E402
from torch._inductor.codegen import common  # noqa: E402
from torch._inductor.codegen.wrapper import PythonWrapperCodegen  # noqa: E402

import cgfast.inductor  # noqa: E402
from cgfast.inductor import _cudagraphs, _install  # noqa: E402
from cgfast.inductor._wrapper import AnnotatingPythonWrapperCodegen  # noqa: E402


def test_toggle_defaults_off_and_takes_every_spelling():
    assert config.triton.cudagraph_kernel_annotations is False
    with config.patch({"triton.cudagraph_kernel_annotations": True}):
        assert config.triton.cudagraph_kernel_annotations is True
    config.triton.cudagraph_kernel_annotations = True
    try:
        assert config.get_config_copy()["triton.cudagraph_kernel_annotations"] is True
    finally:
        config.triton.cudagraph_kernel_annotations = False
    assert config.triton.cudagraph_kernel_annotations is False


def test_install_is_idempotent_and_keeps_each_device_entry():
    before = dict(common.device_codegens.items())
    record = torch._inductor.cudagraph_trees.CUDAGraphNode._record
    assert cgfast.inductor.install() is True
    assert common.device_codegens == before
    assert torch._inductor.cudagraph_trees.CUDAGraphNode._record is record
    assert not getattr(record.__wrapped__, "_cgfast_records_annotations", False)
    for device in ("cpu", "cuda"):
        entry = common.device_codegens[device]
        assert entry.wrapper_codegen is AnnotatingPythonWrapperCodegen
        assert entry.cpp_wrapper_codegen is not None and entry.scheduling is not None


def test_missing_hook_point_fails_naming_the_torch_version(monkeypatch):
    monkeypatch.delattr(torch._inductor.compile_fx, "cudagraphify_impl")
    with pytest.raises(cgfast.inductor.UnsupportedTorchError) as failure:
        _install._check_torch()
    message = str(failure.value)
    assert torch.__version__ in message and "compile_fx.cudagraphify_impl" in message


def test_capture_runs_under_recording_once_cgfast_capture_is_loaded(monkeypatch):
    events = []

    @contextlib.contextmanager
    def recording():
        events.append("start")
        yield
        events.append("end")

    def capture(graph):
        events.append(f"capture {graph}")
        return graph

    recorded = _cudagraphs._recording(capture)
    monkeypatch.delitem(sys.modules, "cgfast.capture", raising=False)
    assert recorded("g1") == "g1" and events == ["capture g1"]

    fake_capture = type(sys)("cgfast.capture")
    fake_capture.recording = recording
    monkeypatch.setitem(sys.modules, "cgfast.capture", fake_capture)
    assert recorded("g2") == "g2"
    assert events == ["capture g1", "start", "capture g2", "end"]


def _run_python(code: str, **env: str) -> dict:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_environment_variable_sets_the_default():
    probe = """
        import json
        import cgfast.inductor
        from torch._inductor import config
        print(json.dumps([config.triton.cudagraph_kernel_annotations, config.triton.cudagraph_kernel_flops]))
    """
    assert _run_python(probe, CGFAST_INDUCTOR_ANNOTATIONS="1", CGFAST_INDUCTOR_FLOPS="1") == [True, True]
    assert _run_python(probe, CGFAST_INDUCTOR_ANNOTATIONS="0") == [False, False]


def test_a_torch_defining_the_toggle_is_left_to_annotate_alone():
    outcome = _run_python(
        """
        import json
        import torch
        from torch._inductor import config
        from torch._inductor.codegen import common
        from torch._inductor.utils import run_and_get_code
        from torch.utils._config_module import _Config, _ConfigEntry
        import inspect

        key = "triton.cudagraph_kernel_annotations"
        spec = _Config(default=False)
        takes_name = "name" in inspect.signature(_ConfigEntry.__init__).parameters
        config._config[key] = _ConfigEntry(spec, key) if takes_name else _ConfigEntry(spec)

        import cgfast.inductor

        common.init_backend_registration()
        with config.patch({key: True}):
            _, (code,) = run_and_get_code(torch.compile(lambda x: x + 1), torch.randn(4))
        print(json.dumps({
            "installed": cgfast.inductor.install(),
            "cpu_wrapper": common.device_codegens["cpu"].wrapper_codegen.__name__,
            "annotated": "_mark_kernels" in code,
        }))
        """
    )
    assert outcome == {
        "installed": False,
        "cpu_wrapper": PythonWrapperCodegen.__name__,
        "annotated": False,
    }
