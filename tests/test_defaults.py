"""The defaults the bindings' signatures (and the stub) show are the core's, which the
command line shows too (`rust/cgfast-core/src/pipeline.rs`, `Options::DEFAULT_STREAM`...)."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

pytest.importorskip("cgfast")
from cgfast import _cgfast


def test_signature_defaults_are_the_cores():
    checked = set()
    for name in _cgfast.__all__:
        function = getattr(_cgfast, name)
        if not callable(function) or isinstance(function, type):
            continue
        for p in inspect.signature(function).parameters.values():
            if p.name in _cgfast.DEFAULTS:
                assert p.default == _cgfast.DEFAULTS[p.name], (name, p.name)
                assert type(p.default) is type(_cgfast.DEFAULTS[p.name]), (name, p.name)
                checked.add((name, p.name))
    assert {p for _, p in checked} == set(_cgfast.DEFAULTS)
    assert ("annotate_file", "gzip_level") in checked and ("annotate_trace", "default_stream") in checked


def test_the_command_line_shows_the_cores_defaults():
    shown = subprocess.run(
        [sys.executable, "-m", "cgfast", "annotate", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for flag, default in _cgfast.DEFAULTS.items():
        text = f"{default:g}" if isinstance(default, float) else str(default)
        block = shown.split(f"--{flag.replace('_', '-')} ")[1].split("\n\n  ")[0]
        assert f"[default: {text}]" in block, (flag, block)
