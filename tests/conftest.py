"""Fixtures and hooks of the tests; the helpers they share are plain functions in
``helpers.py`` (the trace processor's) and ``fake_graph_driver.py`` (the capture's)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings as _hypothesis_settings

from fake_graph_driver import FakeGraphDriver, NativeFakeDriver, build_forwarding_library, fake_driver
from helpers import h200_traces, reference

# CI runs the property tests on fixed examples, so that a red run is a regression and
# never a new random find (which local runs, on fresh examples, are there for).
_hypothesis_settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    _hypothesis_settings.load_profile("ci")


@pytest.fixture(scope="session")
def ref():
    """The reference module (``helpers.reference``)."""
    return reference()


@pytest.fixture(scope="session")
def h200() -> list[Path]:
    """The real H200 traces (``helpers.h200_traces``)."""
    return h200_traces()


@pytest.fixture
def fake() -> Iterator[FakeGraphDriver]:
    """A fresh fake driver as the backend (see ``fake_graph_driver.fake_driver``)."""
    with fake_driver() as driver:
        yield driver


@pytest.fixture(scope="session")
def forwarding_library(tmp_path_factory):
    """``(with_edges=True, graph_edges=True, node_ids=True)`` -> the path of a forwarding
    library so compiled (``fake_graph_driver.build_forwarding_library``), built once."""
    directory = str(tmp_path_factory.mktemp("forwarding"))
    built: dict = {}

    def get(with_edges: bool = True, graph_edges: bool = True, node_ids: bool = True) -> str:
        variant = (with_edges, graph_edges, node_ids)
        if variant not in built:
            built[variant] = build_forwarding_library(
                directory, with_edges=with_edges, graph_edges=graph_edges, node_ids=node_ids
            )
        return built[variant]

    return get


@pytest.fixture
def native_fake(forwarding_library) -> Iterator[NativeFakeDriver]:
    """``fake`` with a driver whose node counts and capture-end walks go through the
    extension, as on libcuda and libcupti (``fake_graph_driver.NativeFakeDriver``)."""
    with fake_driver(NativeFakeDriver(forwarding_library(), native_counts=True)) as driver:
        yield driver  # type: ignore[misc]
