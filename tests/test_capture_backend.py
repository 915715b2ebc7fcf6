"""Choosing the id source: verification on a probe graph, agreement, finding libcupti."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from cgfast.capture import _id_sources
from cgfast.capture._backend import choose_backend
from cgfast.capture._id_sources import IdSourceUnavailable, agree, libcupti_candidates, verify
from cgfast.capture._libcuda import ProbeGraph
from cgfast.capture._runtime import CaptureRuntime

PROBE = ProbeGraph(graph=0xA0, node=0xB0, graph_exec=0xC0)


class ScriptedIds:
    """An id source answering the probe graph with fixed ids (or failing)."""

    def __init__(self, name, graph_id=7, node_id=7 << 32 | 0, exec_id=8, error=None):
        self.name = name
        self._ids = {"graph": graph_id, "node": node_id, "exec": exec_id}
        self._error = error

    def _answer(self, what):
        if self._error is not None:
            raise RuntimeError(self._error)
        return self._ids[what]

    def graph_id(self, graph):
        assert graph == PROBE.graph
        return self._answer("graph")

    def node_id(self, node):
        assert node == PROBE.node
        return self._answer("node")

    def exec_id(self, graph_exec):
        assert graph_exec == PROBE.graph_exec
        return self._answer("exec")


def test_verify_accepts_ids_in_the_graphs_own_id_space():
    verify(ScriptedIds("good"), PROBE)
    verify(ScriptedIds("no exec"), PROBE._replace(graph_exec=None))


def test_verify_rejects_a_failing_source_with_its_error():
    with pytest.raises(IdSourceUnavailable, match="cudaErrorCallRequiresNewerDriver"):
        verify(
            ScriptedIds(
                "old driver", error="cudaGraphNodeGetToolsId failed: cudaErrorCallRequiresNewerDriver"
            ),
            PROBE,
        )


def test_verify_rejects_node_ids_outside_the_graph():
    with pytest.raises(IdSourceUnavailable, match="not in graph 7"):
        verify(ScriptedIds("odd", node_id=9 << 32 | 0), PROBE)


def test_agree_names_the_first_difference():
    assert agree(ScriptedIds("tools-id"), ScriptedIds("cupti"), PROBE) is None
    assert (
        agree(ScriptedIds("tools-id"), ScriptedIds("cupti", exec_id=9), PROBE)
        == "exec id: tools-id says 0x8, cupti says 0x9"
    )
    message = agree(ScriptedIds("tools-id"), ScriptedIds("cupti", graph_id=3, node_id=3 << 32), PROBE)
    assert message.startswith("graph id: ")


def test_a_library_without_the_cupti_calls_is_unavailable():
    with pytest.raises(IdSourceUnavailable):
        _id_sources.CuptiIdSource("libc.so.6")
    with pytest.raises(IdSourceUnavailable):
        _id_sources.CuptiIdSource("/nonexistent/libcupti.so.13")


def test_libcupti_candidates_cover_the_wheel_layouts(tmp_path, monkeypatch):
    nvidia = tmp_path / "nvidia"
    for layout in ("cu13/lib", "cuda_cupti/lib"):
        (nvidia / layout).mkdir(parents=True)
    (nvidia / "cu13/lib/libcupti.so.13").write_bytes(b"")
    (nvidia / "cuda_cupti/lib/libcupti.so.12").write_bytes(b"")
    toolkit = tmp_path / "cuda"
    (toolkit / "extras/CUPTI/lib64").mkdir(parents=True)
    (toolkit / "extras/CUPTI/lib64/libcupti.so.12").write_bytes(b"")
    for variable in _id_sources.TOOLKIT_HOME_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("CUDA_HOME", str(toolkit))
    monkeypatch.setattr(_id_sources, "DEFAULT_TOOLKIT_HOMES", ())
    monkeypatch.setattr(_id_sources, "_loaded_libcupti", list)
    monkeypatch.setattr(_id_sources, "_torch_libcupti", list)
    wheel_dirs = [nvidia / "cuda_cupti/lib", nvidia / "cu13/lib"]
    monkeypatch.setattr(
        _id_sources,
        "_wheel_libcupti",
        lambda: [p for d in wheel_dirs for p in _id_sources._glob_libcupti(str(d))],
    )
    candidates = libcupti_candidates(cuda_major=13)
    assert candidates[:3] == [
        str(nvidia / "cu13/lib/libcupti.so.13"),  # the matching major first
        str(nvidia / "cuda_cupti/lib/libcupti.so.12"),
        str(toolkit / "extras/CUPTI/lib64/libcupti.so.12"),
    ]
    assert candidates[3:] == ["libcupti.so.13", "libcupti.so.12", "libcupti.so"]


def test_a_copy_already_loaded_in_the_process_comes_first(monkeypatch, tmp_path):
    loaded = tmp_path / "libcupti.so.13"
    loaded.write_bytes(b"")
    monkeypatch.setattr(_id_sources, "_loaded_libcupti", lambda: [str(loaded)])
    assert libcupti_candidates(13)[0] == str(loaded)


def test_the_real_wheel_search_finds_installed_wheels():
    spec = _id_sources.importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations) if spec else []
    installed = [
        os.path.join(root, layout, name)
        for root in roots
        for layout in ("cu13/lib", "cuda_cupti/lib")
        for name in ("libcupti.so.13", "libcupti.so.12")
        if os.path.exists(os.path.join(root, layout, name))
    ]
    if not installed:
        pytest.skip("no nvidia-cuda-cupti wheel installed here")
    assert set(installed) <= set(_id_sources._wheel_libcupti())


def test_without_cuda_there_is_no_backend_and_it_says_why():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    backend, reason = choose_backend()
    assert backend is None
    assert "torch.cuda is not available" in reason
    fresh = CaptureRuntime()
    assert fresh.describe() == f"none: {reason}"


def test_importing_cgfast_capture_neither_imports_torch_nor_chooses_a_backend():
    code = (
        "import sys, cgfast, cgfast.capture as c\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "assert not c._runtime.runtime.backend_chosen, 'backend chosen at import'\n"
        "with c.mark_kernels('disabled'):\n"
        "    pass\n"
        "assert 'torch' not in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ)
    )
    assert result.returncode == 0, result.stderr
