"""The native graph walk (rust/cgfast-py/src/graph_walk.rs) against the Python one.

The fake driver's graphs are served to the native code through ``ctypes`` callbacks with
the C signatures of cuGraphGetNodes, cuGraphNodeGetType, cuptiGetGraphNodeId,
cuGraphNodeGetDependencies(_v2), cuGraphKernelNodeGetParams_v2 and cuFuncGetName, so the
walk calls real function pointers, as it does on libcuda and libcupti."""

from __future__ import annotations

import ctypes
from typing import Optional

import pytest

from cgfast import _cgfast, capture
from cgfast.capture._core import Recorder
from cgfast.capture._graphs import patch_class, uninstall, unpatch_class
from cgfast.capture._libcuda import _KernelNodeParams, function_address
from cgfast.capture._state import state
from fake_graph_driver import FakeCUDAGraph, FakeGraphDriver, capturing

_NODE_ARRAY = ctypes.POINTER(ctypes.c_void_p)
_SIZE_P = ctypes.POINTER(ctypes.c_size_t)
_GET_NODES = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _NODE_ARRAY, _SIZE_P)
_NODE_TYPE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int))
_NODE_ID = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64))
_DEPS_V2 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _NODE_ARRAY, ctypes.c_void_p, _SIZE_P)
_DEPS_V1 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _NODE_ARRAY, _SIZE_P)
_EDGES_V2 = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.c_void_p, _NODE_ARRAY, _NODE_ARRAY, ctypes.c_void_p, _SIZE_P
)
_EDGES_V1 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, _NODE_ARRAY, _NODE_ARRAY, _SIZE_P)
_PARAMS = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_KernelNodeParams))
_NAME = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p)

FAILED = 999


class NativeFakeDriver(FakeGraphDriver):
    """The fake driver whose capture-end walk goes through ``_cgfast.walk_graph``, as
    ``LibcudaGraphs.walk_topology`` does, on ``ctypes`` callbacks over the fake."""

    def __init__(self, with_edges: bool = True, graph_edges: bool = True) -> None:
        super().__init__()
        self.failing_native: set = set()
        self.walks = 0
        self.native_calls: dict = {}
        self._names: dict[int, ctypes.Array] = {}  # function handle -> its name's bytes
        self._handles: dict[str, int] = {}  # kernel name -> function handle
        self._callbacks = {
            "get_nodes": _GET_NODES(self._get_nodes),
            "node_type": _NODE_TYPE(self._node_type),
            "node_id": _NODE_ID(self._node_id),
            "dependencies": (_DEPS_V2 if with_edges else _DEPS_V1)(
                self._deps_v2 if with_edges else self._deps_v1
            ),
            "kernel_params": _PARAMS(self._kernel_params),
            "function_name": _NAME(self._function_name),
        }
        if graph_edges:
            self._callbacks["edges"] = (_EDGES_V2 if with_edges else _EDGES_V1)(
                self._edges_v2 if with_edges else self._edges_v1
            )
        self.addresses = {name: function_address(fn) for name, fn in self._callbacks.items()}
        self.addresses["dependencies_have_edges"] = int(with_edges)
        self.addresses["edges_have_data"] = int(with_edges)

    def walk_topology(self, graph: int, ids) -> Optional[tuple]:
        self.walks += 1
        return _cgfast.walk_graph(self.addresses, graph)

    # -- the C entry points ----------------------------------------------------------

    def _fill(self, handles: list[int], out, count) -> int:
        if out:
            for i, handle in enumerate(handles[: count[0]]):
                out[i] = handle
        count[0] = len(handles)
        return 0

    def _get_nodes(self, graph, out, count):
        if "get_nodes" in self.failing_native:
            return FAILED
        return self._fill([n.handle for n in self._objects[graph].nodes], out, count)

    def _node_type(self, node, out):
        if "node_type" in self.failing_native:
            return FAILED
        out[0] = int(self._objects[node].type)
        return 0

    def _node_id(self, node, out):
        out[0] = self._objects[node].node_id
        return 0

    def _deps_v1(self, node, out, count):
        self.native_calls["dependencies"] = self.native_calls.get("dependencies", 0) + 1
        return self._fill([n.handle for n in self._objects[node].deps], out, count)

    def _edges_v1(self, graph, sources, targets, count):
        self.native_calls["edges"] = self.native_calls.get("edges", 0) + 1
        edges = [(dep.handle, node.handle) for node in self._objects[graph].nodes for dep in node.deps]
        if sources:
            for i, (source, target) in enumerate(edges[: count[0]]):
                sources[i], targets[i] = source, target
        count[0] = len(edges)
        return 0

    def _edges_v2(self, graph, sources, targets, data, count):
        if sources and not data:
            return FAILED  # a lossy query: edge data must be asked for with the edges
        return self._edges_v1(graph, sources, targets, count)

    def _deps_v2(self, node, out, edges, count):
        if out and not edges:
            return FAILED  # a lossy query: edge data must be asked for with the nodes
        return self._deps_v1(node, out, count)

    def _kernel_params(self, node, params):
        launch = self._objects[node].launch
        handle = self._handles.get(launch.name)
        if handle is None:
            name = ctypes.create_string_buffer(launch.name.encode())
            handle = self._handles[launch.name] = ctypes.addressof(name)
            self._names[handle] = name
        p = params[0]
        p.func = handle
        p.gridDimX, p.gridDimY, p.gridDimZ = launch.grid
        p.blockDimX, p.blockDimY, p.blockDimZ = launch.block
        p.kern = None
        return 0

    def _function_name(self, out, handle):
        out[0] = ctypes.cast(self._names[handle], ctypes.c_char_p).value
        return 0


@pytest.fixture
def use_driver():
    """Make a driver the backend, with a fresh recorder, FakeCUDAGraph patched."""
    patch_class(FakeCUDAGraph)
    try:

        def use(driver: FakeGraphDriver) -> FakeGraphDriver:
            state.recorder = Recorder()
            state.use_backend(driver.backend())
            return driver

        yield use
    finally:
        unpatch_class(FakeCUDAGraph)
        uninstall()
        state.enabled = False
        state.recorder = Recorder()
        state.forget_backend()


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
def test_native_walk_records_what_the_python_walk_records(use_driver, with_edges, graph_edges):
    recorded = []
    for driver in (FakeGraphDriver(), NativeFakeDriver(with_edges, graph_edges)):
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


def test_native_node_count_and_walk_of_an_empty_graph(use_driver):
    driver = use_driver(NativeFakeDriver())
    graph = driver._new_graph()
    assert _cgfast.walk_graph(driver.addresses, graph.handle) == (0, [], 0)
    assert _cgfast.graph_node_count(driver.addresses["get_nodes"], graph.handle) == 0
    g = FakeCUDAGraph(driver, keep_graph=True)
    with capturing(g):
        driver.launch("a")
        driver.add_node(5)
        driver.memcpy()
    assert _cgfast.graph_node_count(driver.addresses["get_nodes"], g.raw_cuda_graph()) == 3
    count, entries, child_graphs = _cgfast.walk_graph(driver.addresses, g.raw_cuda_graph())
    graph_id = g.template.id
    assert (count, child_graphs) == (3, 0)
    assert entries == [
        (graph_id << 32, 0, "a", [], [1, 1, 1], [128, 1, 1]),
        (graph_id << 32 | 2, 1, None, [0], None, None),
    ]


def test_a_graph_with_child_graphs_is_left_to_the_python_walk(use_driver):
    driver = use_driver(NativeFakeDriver())
    g = FakeCUDAGraph(driver, keep_graph=True)
    with capturing(g):
        driver.launch("a")
        driver.child_graph(["inside"])
    assert _cgfast.walk_graph(driver.addresses, g.raw_cuda_graph()) == (2, [], 1)
    with capture.recording():
        g = FakeCUDAGraph(driver)
        with capturing(g):
            driver.launch("a")
            driver.child_graph(["inside"])
    topology = capture.get_graph_topology()[g.graph_exec.id]
    assert [node["name"] for node in topology] == ["a", "inside"]  # the body's kernel too


def test_a_failing_driver_call_is_an_error_naming_it(use_driver):
    driver = use_driver(NativeFakeDriver())
    g = FakeCUDAGraph(driver, keep_graph=True)
    with capturing(g):
        driver.launch("a")
    driver.failing_native.add("node_type")
    with pytest.raises(RuntimeError, match=r"cuGraphNodeGetType failed: error 999"):
        _cgfast.walk_graph(driver.addresses, g.raw_cuda_graph())
    driver.failing_native = {"get_nodes"}
    with pytest.raises(RuntimeError, match=r"cuGraphGetNodes failed: error 999"):
        _cgfast.graph_node_count(driver.addresses["get_nodes"], g.raw_cuda_graph())


def test_a_failed_native_walk_falls_back_to_reading_the_nodes(use_driver, caplog):
    driver = use_driver(NativeFakeDriver())
    driver.failing_native.add("node_type")
    capture.enable_annotations()
    g = FakeCUDAGraph(driver)
    with capturing(g), capture.mark_kernels("scope"):
        node = driver.launch("a")
    assert "recording the topology of a captured graph failed" in caplog.text
    assert capture.get_kernel_annotations() == {g.graph_exec.id << 32 | node.local_id: [{"name": "scope"}]}
    assert capture.get_graph_topology() == {}


def test_missing_addresses_are_refused(use_driver):
    driver = use_driver(NativeFakeDriver())
    addresses = dict(driver.addresses, node_id=0)
    with pytest.raises(ValueError, match="no address for node_id"):
        _cgfast.walk_graph(addresses, 0)
    with pytest.raises(ValueError, match="no address for get_nodes"):
        _cgfast.graph_node_count(0, 0)
