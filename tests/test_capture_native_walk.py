"""The native graph walk (rust/cgfast-py/src/graph_walk.rs) against the Python one.

The extension calls only functions it looks up itself in libraries the process has
loaded: here a real shared library standing in for libcuda and libcupti whose entry
points forward to ``ctypes`` callbacks over the fake driver's graphs
(``fake_graph_driver.NativeFakeDriver``), and bench/bench_driver_calls.py's stand-in."""

from __future__ import annotations

import ctypes
import os
import sys

import pytest

from cgfast import _cgfast, capture
from cgfast.capture._core import Recorder
from cgfast.capture._id_sources import CuptiIdSource
from cgfast.capture._interface import Backend
from cgfast.capture._libcuda import LibcudaGraphs
from cgfast.capture._patches import patch_class, uninstall, unpatch_class
from cgfast.capture._runtime import runtime
from fake_graph_driver import FakeCUDAGraph, FakeGraphDriver, NativeFakeDriver, capturing

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from bench_driver_calls import build_stand_in


@pytest.fixture
def use_driver():
    """Make a driver the backend, with a fresh recorder, FakeCUDAGraph patched."""
    patch_class(FakeCUDAGraph)
    try:

        def use(driver: FakeGraphDriver) -> FakeGraphDriver:
            runtime.recorder = Recorder()
            runtime.use_backend(driver.backend())
            return driver

        yield use
    finally:
        unpatch_class(FakeCUDAGraph)
        uninstall()
        runtime.reset()


@pytest.fixture
def native(forwarding_library):
    """A NativeFakeDriver on the forwarding library of its versions of the entry points."""

    def make(with_edges: bool = True, graph_edges: bool = True) -> NativeFakeDriver:
        return NativeFakeDriver(forwarding_library(with_edges, graph_edges), with_edges, graph_edges)

    return make


def _workload(driver: FakeGraphDriver) -> FakeCUDAGraph:
    """Two streams, events, memcpy/memset, host and empty nodes, and a join of many
    streams (more edges than a small buffer holds)."""
    g = FakeCUDAGraph(driver)
    with capturing(g) as main:
        with capture.mark_kernels({"layer": "first"}):
            driver.launch("k_first", grid=(4, 2, 1), block=(256, 1, 1))
            driver.memset()
        side = driver.new_stream()
        driver.wait_stream(side, main)
        with driver.use(side), capture.mark_kernels("side"):
            driver.launch("k_side")
            driver.memcpy()
        driver.record_event(external=True)
        driver.add_node(3)  # a host node
        driver.wait_stream(main, side)
        driver.launch("k_after_join")
        forks = [driver.new_stream() for _ in range(12)]
        for stream in forks:
            driver.wait_stream(stream, main)
            with driver.use(stream):
                driver.add_node(5)  # empty
                driver.launch("k_fork")
        for stream in forks:
            driver.wait_stream(main, stream)
        with capture.mark_kernels({"layer": "last"}):
            driver.launch("k_last")
    return g


@pytest.mark.parametrize("with_edges", [True, False])
@pytest.mark.parametrize("graph_edges", [True, False])
def test_native_walk_records_what_the_python_walk_records(use_driver, native, with_edges, graph_edges):
    recorded = []
    for driver in (FakeGraphDriver(), native(with_edges, graph_edges)):
        use_driver(driver)
        with capture.recording():
            g = _workload(driver)
        exec_id = g.graph_exec.id
        recorded.append(
            (
                exec_id,
                capture.get_graph_topology()[exec_id],
                {key & 0xFFFFFFFF: value for key, value in capture.get_kernel_annotations().items()},
            )
        )
    (python_exec, python_topology, python_annotations), (native_exec, native_topology, native_annotations) = (
        recorded
    )
    assert driver.walks == 1
    # with cuGraphGetEdges: one count query and one fill for the whole graph
    assert driver.native_calls == (
        {"edges": 2} if graph_edges else {"dependencies": driver.native_calls["dependencies"]}
    )
    high = (native_exec - python_exec) << 32
    assert native_topology == [
        {**node, "id": node["id"] + high, "deps": [dep + high for dep in node["deps"]]}
        for node in python_topology
    ]
    assert len(native_topology) == 18
    fork_join = next(node for node in native_topology if node["name"] == "k_last")
    assert len(fork_join["deps"]) == 13  # k_after_join and 12 forks: more edges than 8
    assert native_annotations == python_annotations and len(native_annotations) == 5


def test_native_node_count_and_walk_of_an_empty_graph(use_driver, native):
    driver = use_driver(native())
    graph = driver._new_graph()
    assert _cgfast._walk_graph(driver.functions, graph.handle) == (0, [], 0)
    assert _cgfast._graph_node_count(driver.functions, graph.handle) == 0
    g = FakeCUDAGraph(driver, keep_graph=True)
    with capturing(g):
        driver.launch("a")
        driver.add_node(5)
        driver.memcpy()
    assert _cgfast._graph_node_count(driver.functions, g.raw_cuda_graph()) == 3
    count, entries, child_graphs = _cgfast._walk_graph(driver.functions, g.raw_cuda_graph())
    graph_id = g.template.id
    assert (count, child_graphs) == (3, 0)
    assert entries == [
        (graph_id << 32, 0, "a", [], [1, 1, 1], [128, 1, 1]),
        (graph_id << 32 | 2, 1, None, [0], None, None),
    ]


def test_a_graph_with_child_graphs_is_left_to_the_python_walk(use_driver, native):
    driver = use_driver(native())
    g = FakeCUDAGraph(driver, keep_graph=True)
    with capturing(g):
        driver.launch("a")
        driver.child_graph(["inside"])
    assert _cgfast._walk_graph(driver.functions, g.raw_cuda_graph()) == (2, [], 1)
    with capture.recording():
        g = FakeCUDAGraph(driver)
        with capturing(g):
            driver.launch("a")
            driver.child_graph(["inside"])
    topology = capture.get_graph_topology()[g.graph_exec.id]
    assert [node["name"] for node in topology] == ["a", "inside"]  # the body's kernel too


def test_a_failing_driver_call_is_an_error_naming_it(use_driver, native):
    driver = use_driver(native())
    g = FakeCUDAGraph(driver, keep_graph=True)
    with capturing(g):
        driver.launch("a")
    driver.failing_native.add("node_type")
    with pytest.raises(RuntimeError, match=r"cuGraphNodeGetType failed: error 999"):
        _cgfast._walk_graph(driver.functions, g.raw_cuda_graph())
    driver.failing_native = {"get_nodes"}
    with pytest.raises(RuntimeError, match=r"cuGraphGetNodes failed: error 999"):
        _cgfast._graph_node_count(driver.functions, g.raw_cuda_graph())


def test_a_failed_native_walk_falls_back_to_reading_the_nodes(use_driver, native, caplog):
    driver = use_driver(native())
    driver.failing_native.add("node_type")
    capture.enable_annotations()
    g = FakeCUDAGraph(driver)
    with capturing(g), capture.mark_kernels("scope"):
        node = driver.launch("a")
    assert "recording the topology of a captured graph failed" in caplog.text
    assert capture.get_kernel_annotations() == {g.graph_exec.id << 32 | node.local_id: [{"name": "scope"}]}
    assert capture.get_graph_topology() == {}


def test_only_functions_the_extension_resolved_itself_are_called(forwarding_library, tmp_path):
    with_ids, without_ids = forwarding_library(), forwarding_library(node_ids=False)
    # anything but what _resolve_graph_functions made is refused, before any call
    for not_resolved in (0, 0x7F00DEAD, {"get_nodes": 0x7F00DEAD, "node_id": 0x7F00DEAD}, with_ids):
        with pytest.raises(TypeError, match="_GraphFunctions"):
            _cgfast._graph_node_count(not_resolved, 0)
        with pytest.raises(TypeError, match="_GraphFunctions"):
            _cgfast._walk_graph(not_resolved, 0)
    with pytest.raises(TypeError, match="_GraphFunctions"):
        _cgfast._GraphFunctions()
    # only in libraries this process has loaded, and never loaded here
    never_loaded = tmp_path / "libnever_loaded.so"
    with open(with_ids, "rb") as built:
        never_loaded.write_bytes(built.read())
    for name in (str(never_loaded), str(tmp_path / "missing.so")):
        with pytest.raises(ValueError, match="is not loaded in this process"):
            _cgfast._resolve_graph_functions(name)
    with open("/proc/self/maps") as maps:
        assert str(never_loaded) not in maps.read()
    # a library without the driver's functions, or CUPTI's
    with pytest.raises(ValueError, match=r"libc\.so\.6 exports none of cuGraphGetNodes"):
        _cgfast._resolve_graph_functions("libc.so.6")
    with pytest.raises(ValueError, match="exports none of cuptiGetGraphNodeId"):
        _cgfast._resolve_graph_functions(with_ids, without_ids)
    counts_only = _cgfast._resolve_graph_functions(without_ids)
    assert without_ids in repr(counts_only)
    with pytest.raises(ValueError, match="resolved without libcupti"):
        _cgfast._walk_graph(counts_only, 0)


def test_libcuda_graphs_walk_and_count_natively_on_the_stand_in(tmp_path):
    """The production driver class on bench/bench_driver_calls.py's stand-in (a chain of
    kernel nodes): node counts through the extension, and a native topology walk equal
    to the Python one."""
    library = build_stand_in(str(tmp_path), 40)
    graphs = LibcudaGraphs(ctypes.CDLL(library))
    ids = CuptiIdSource(library)
    assert graphs.node_count.func is _cgfast._graph_node_count
    assert graphs.node_count(0x99) == 40

    class PythonOnlyIds:  # no library the extension could call: the Python walk
        name = ids.name
        node_id, graph_id, exec_id = ids.node_id, ids.graph_id, ids.exec_id

    topologies = []
    for source in (ids, PythonOnlyIds()):
        recorder = Recorder()
        recorder.record_topology(Backend(graphs, source, None, "stand-in"), 0x99, 1)
        topologies.append(recorder.topology()[1])
    native, python = topologies
    assert graphs.walk_topology(0x99, PythonOnlyIds()) is None
    assert native == python and len(native) == 40
    assert native[5] == {
        "id": 1 << 32 | 5,
        "type": "kernel",
        "name": "some_kernel_name",
        "deps": [1 << 32 | 4],
        "grid": [1, 1, 1],
        "block": [128, 1, 1],
    }
