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


# Fixtures that several modules here turn on for all their tests, through
# ``pytestmark = pytest.mark.usefixtures(...)``; they import torch and cgfast only when used.


@pytest.fixture
def fresh_registry():
    """Annotations off and the registry empty, before and after the test."""
    from cgfast import capture

    capture.disable_annotations()
    capture.clear_kernel_annotations()
    yield
    capture.disable_annotations()
    capture.clear_kernel_annotations()


@pytest.fixture(scope="module")
def isolated_inductor_cache():
    """One fresh Inductor cache for the module's compilations."""
    from torch._inductor.utils import fresh_cache

    with fresh_cache():
        yield


@pytest.fixture
def inductor_annotations_on():
    """Inductor's launch brackets on, Dynamo reset and the registry empty, before and
    after the test."""
    from torch._inductor import config

    from cgfast import capture
    from cgfast.inductor import TOGGLE_KEY

    torch._dynamo.reset()
    capture.clear_kernel_annotations()
    with config.patch({TOGGLE_KEY: True}):
        yield
    torch._dynamo.reset()
    capture.clear_kernel_annotations()
