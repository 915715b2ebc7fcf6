"""Tests that need a CUDA device. Where torch is missing nothing here is collected; where
torch has no CUDA device every test here is skipped (CI has no GPU)."""

from __future__ import annotations

import os

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import torch
except ImportError:
    torch = None
    collect_ignore_glob = ["*.py"]

if torch is None:
    _SKIP_REASON = "torch is not installed"
elif not torch.cuda.is_available():
    _SKIP_REASON = "no CUDA device"
else:
    _SKIP_REASON = None


def pytest_collection_modifyitems(config, items):
    if _SKIP_REASON is None:
        return
    skip = pytest.mark.skip(reason=f"GPU test: {_SKIP_REASON}")
    for item in items:
        if os.path.abspath(str(item.fspath)).startswith(_HERE + os.sep):
            item.add_marker(skip)
