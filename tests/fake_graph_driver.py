"""An in-memory model of CUDA stream capture behind cgfast.capture's driver interface.

It models what the capture logic relies on: graphs of typed nodes with dependency
edges, per-stream capture state whose frontier is what the next node depends on,
fork/join through events, graph ids from one process-wide counter (capture graphs and
executable graphs alike), node ids ``graph_id << 32 | local_id``, instantiation handing
out fresh exec ids, child-graph nodes and conditional bodies captured into their own
graph. ``FakeCUDAGraph`` stands in for ``torch.cuda.CUDAGraph`` in both of torch's
instantiation styles.

``NativeFakeDriver`` serves the same graphs to the extension's native graph walk and node
count, which call only functions they look up themselves in loaded libraries: a real
shared library standing in for libcuda and libcupti (compiled with ``cc``,
``build_forwarding_library``) whose cuGraphGetNodes, cuGraphNodeGetType,
cuptiGetGraphNodeId, cuGraphNodeGetDependencies(_v2), cuGraphGetEdges(_v2),
cuGraphKernelNodeGetParams_v2 and cuFuncGetName, with those C signatures, forward to
``ctypes`` callbacks over the fake.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import subprocess
from typing import Dict, Iterator, List, Optional

from cgfast import _cgfast
from cgfast.capture._interface import Backend, CaptureState, KernelLaunch, NodeType
from cgfast.capture._libcuda import _KernelNodeParams
from cgfast.capture._patches import patch_class, uninstall, unpatch_class
from cgfast.capture._runtime import runtime


class FakeNode:
    def __init__(self, graph: FakeGraph, node_type: NodeType, launch: Optional[KernelLaunch]):
        self.handle = 0
        self.graph = graph
        self.local_id = len(graph.nodes)
        self.type = node_type
        self.launch = launch
        self.deps: List[FakeNode] = []
        self.dependents: List[FakeNode] = []
        self.body: Optional[FakeGraph] = None

    @property
    def node_id(self) -> int:
        return self.graph.id << 32 | self.local_id


class FakeGraph:
    def __init__(self, graph_id: int):
        self.handle = 0
        self.id = graph_id
        self.nodes: List[FakeNode] = []


class FakeExec:
    def __init__(self, exec_id: int, graph: FakeGraph):
        self.handle = 0
        self.id = exec_id
        self.graph = graph


class FakeStream:
    def __init__(self) -> None:
        self.handle = 0
        self.capture: Optional[FakeGraph] = None
        self.frontier: List[FakeNode] = []
        self.origin = False  # the stream the capture began on
        self.outer: List[tuple] = []  # saved (graph, frontier) while capturing a conditional body

    @property
    def cuda_stream(self) -> int:
        return self.handle


class FakeEvent:
    def __init__(self, graph: Optional[FakeGraph], nodes: List[FakeNode]):
        self.graph = graph
        self.nodes = nodes


class FakeGraphDriver:
    """GraphDriver + IdSource + StreamOps over the model (handles are ints)."""

    name = "fake"

    def __init__(self) -> None:
        self._next_handle = 0x1000
        self._next_graph_id = 1
        self._objects: Dict[int, object] = {}
        self.calls: Dict[str, int] = {}
        self.failing: set = set()  # names of driver queries that raise
        self.default_stream = self.new_stream()
        self._current = self.default_stream

    def backend(self) -> Backend:
        return Backend(self, self, self, "fake: in-memory graphs")

    # -- program side: what a workload does ---------------------------------------------

    def _register(self, obj):
        obj.handle = self._next_handle
        self._next_handle += 0x10
        self._objects[obj.handle] = obj
        return obj

    def _new_graph(self) -> FakeGraph:
        return self._register(FakeGraph(self._take_graph_id()))

    def _take_graph_id(self) -> int:
        graph_id = self._next_graph_id
        self._next_graph_id += 1
        return graph_id

    def new_stream(self) -> FakeStream:
        return self._register(FakeStream())

    def current(self) -> FakeStream:
        return self._current

    @contextlib.contextmanager
    def use(self, stream: FakeStream) -> Iterator[FakeStream]:
        previous, self._current = self._current, stream
        try:
            yield stream
        finally:
            self._current = previous

    def begin_capture(self, stream: Optional[FakeStream] = None) -> FakeGraph:
        stream = stream or self._current
        if stream.capture is not None:
            raise RuntimeError("stream is already capturing")
        stream.capture = self._new_graph()
        stream.frontier = []
        stream.origin = True
        return stream.capture

    def end_capture(self, stream: Optional[FakeStream] = None) -> FakeGraph:
        stream = stream or self._current
        graph = stream.capture
        if graph is None or not stream.origin:
            raise RuntimeError("stream did not begin a capture")
        joined = self._ancestors(stream.frontier)
        members = [s for s in self._objects.values() if isinstance(s, FakeStream) and s.capture is graph]
        for member in members:
            member.capture, member.frontier, member.origin = None, [], False
        if any(node not in joined for node in graph.nodes):
            raise RuntimeError("cudaErrorStreamCaptureUnjoined: a forked stream was not joined back")
        return graph

    @staticmethod
    def _ancestors(nodes: List[FakeNode]) -> set:
        seen = set(nodes)
        stack = list(nodes)
        while stack:
            for dep in stack.pop().deps:
                if dep not in seen:
                    seen.add(dep)
                    stack.append(dep)
        return seen

    def add_node(
        self,
        node_type: NodeType,
        stream: Optional[FakeStream] = None,
        launch: Optional[KernelLaunch] = None,
    ) -> Optional[FakeNode]:
        """Add a node to the stream's capture after its frontier; eager work adds none."""
        stream = stream or self._current
        graph = stream.capture
        if graph is None:
            return None
        node = self._register(FakeNode(graph, node_type, launch))
        graph.nodes.append(node)
        for dep in stream.frontier:
            node.deps.append(dep)
            dep.dependents.append(node)
        stream.frontier = [node]
        return node

    def launch(self, name: str, grid=(1, 1, 1), block=(128, 1, 1), stream: Optional[FakeStream] = None):
        return self.add_node(NodeType.KERNEL, stream, KernelLaunch(name, tuple(grid), tuple(block)))

    def memcpy(self, stream: Optional[FakeStream] = None):
        return self.add_node(NodeType.MEMCPY, stream)

    def memset(self, stream: Optional[FakeStream] = None):
        return self.add_node(NodeType.MEMSET, stream)

    def record_event(self, stream: Optional[FakeStream] = None, external: bool = False) -> FakeEvent:
        """Plain events only carry the frontier; ``external`` ones add an event-record node."""
        stream = stream or self._current
        if external and stream.capture is not None:
            self.add_node(NodeType.EVENT_RECORD, stream)
        return FakeEvent(stream.capture, list(stream.frontier))

    def wait_event(self, event: FakeEvent, stream: Optional[FakeStream] = None) -> None:
        stream = stream or self._current
        if event.graph is None:
            return
        if stream.capture is None:  # joins the capture (fork)
            stream.capture = event.graph
            stream.frontier = list(event.nodes)
            return
        if stream.capture is not event.graph:
            raise RuntimeError("cannot wait on an event of another capture")
        stream.frontier = stream.frontier + [n for n in event.nodes if n not in stream.frontier]

    def wait_stream(self, waiter: FakeStream, waited: FakeStream) -> None:
        self.wait_event(self.record_event(waited), waiter)

    def child_graph(self, kernel_names=("child_kernel",), stream: Optional[FakeStream] = None):
        body = self._new_graph()
        for name in kernel_names:
            body.nodes.append(
                self._register(FakeNode(body, NodeType.KERNEL, KernelLaunch(name, (1, 1, 1), (32, 1, 1))))
            )
        node = self.add_node(NodeType.GRAPH, stream)
        if node is not None:
            node.body = body
        return node

    def begin_conditional(self, stream: Optional[FakeStream] = None) -> FakeGraph:
        """Add a conditional node and capture what follows into its body graph."""
        stream = stream or self._current
        node = self.add_node(NodeType.CONDITIONAL, stream)
        node.body = self._new_graph()
        stream.outer.append((stream.capture, [node]))
        stream.capture, stream.frontier = node.body, []
        return node.body

    def end_conditional(self, stream: Optional[FakeStream] = None) -> None:
        stream = stream or self._current
        stream.capture, stream.frontier = stream.outer.pop()

    def instantiate(self, graph: FakeGraph) -> FakeExec:
        return self._register(FakeExec(self._take_graph_id(), graph))

    # -- GraphDriver ---------------------------------------------------------------------

    def _count(self, call: str) -> None:
        if call in self.failing:
            raise RuntimeError(f"{call} failed (injected)")
        self.calls[call] = self.calls.get(call, 0) + 1

    def capture_state(self, stream: int) -> Optional[CaptureState]:
        self._count("capture_state")
        fake_stream = self._objects[stream]
        if fake_stream.capture is None:
            return None
        return CaptureState(fake_stream.capture.handle, [n.handle for n in fake_stream.frontier])

    def capture_graph(self, stream: int) -> Optional[int]:
        self._count("capture_graph")
        fake_stream = self._objects[stream]
        return fake_stream.capture.handle if fake_stream.capture is not None else None

    def node_count(self, graph: int) -> int:
        self._count("node_count")
        return len(self._objects[graph].nodes)

    def root_nodes(self, graph: int) -> List[int]:
        self._count("root_nodes")
        return [n.handle for n in self._objects[graph].nodes if not n.deps]

    def nodes(self, graph: int) -> List[int]:
        self._count("nodes")
        return [n.handle for n in self._objects[graph].nodes]

    def dependents(self, node: int) -> List[int]:
        self._count("dependents")
        return [n.handle for n in self._objects[node].dependents]

    def dependencies(self, node: int) -> List[int]:
        self._count("dependencies")
        return [n.handle for n in self._objects[node].deps]

    def node_type(self, node: int) -> int:
        self._count("node_type")
        return int(self._objects[node].type)

    def kernel_launch(self, node: int) -> KernelLaunch:
        self._count("kernel_launch")
        launch = self._objects[node].launch
        if launch is None:
            raise RuntimeError("not a kernel node")
        return launch

    def child_graph_body(self, node: int) -> int:
        self._count("child_graph_body")
        body = self._objects[node].body
        if body is None:
            raise RuntimeError("not a child graph node")
        return body.handle

    def exec_local_ids(self, graph: FakeGraph) -> Dict[FakeNode, int]:
        """What CUPTI reports as the local id of each node of ``graph``'s instance, as
        measured on the H200 (tools/probe_graph_bodies.py): a node keeps its own, and the
        nodes of child-graph bodies follow the parent's, body by body in the order of
        their child nodes."""
        local_ids = {node: node.local_id for node in graph.nodes}
        offset = len(graph.nodes)
        for node in graph.nodes:
            if node.type == NodeType.GRAPH and node.body is not None:
                for inner in node.body.nodes:
                    local_ids[inner] = offset + inner.local_id
                offset += len(node.body.nodes)
        return local_ids

    # -- IdSource --------------------------------------------------------------------------

    def node_id(self, node: int) -> int:
        self._count("node_id")
        return self._objects[node].node_id

    def graph_id(self, graph: int) -> int:
        self._count("graph_id")
        return self._objects[graph].id

    def exec_id(self, graph_exec: int) -> int:
        self._count("exec_id")
        return self._objects[graph_exec].id

    # -- StreamOps -------------------------------------------------------------------------

    def capturing_stream(self) -> Optional[int]:
        self._count("capturing_stream")
        return self._current.cuda_stream if self._current.capture is not None else None

    def current_stream(self) -> int:
        return self._current.cuda_stream

    def handle(self, stream: FakeStream) -> int:
        return stream.cuda_stream


class FakeCUDAGraph:
    """``torch.cuda.CUDAGraph`` on the fake driver. ``python_instantiate=True`` is torch
    >= 2.15 (``capture_end`` and ``replay`` instantiate through ``self.instantiate()``);
    ``False`` is torch <= 2.14, whose C++ does it without calling Python."""

    def __init__(self, driver: FakeGraphDriver, keep_graph: bool = False, python_instantiate: bool = True):
        self.driver = driver
        self.keep_graph = keep_graph
        self.python_instantiate = python_instantiate
        self.template: Optional[FakeGraph] = None
        self.graph_exec: Optional[FakeExec] = None
        self.replays = 0
        self._stream: Optional[FakeStream] = None

    def capture_begin(self, pool=None, capture_error_mode="global"):
        self._stream = self.driver.current()
        self.template = self.driver.begin_capture(self._stream)
        self.graph_exec = None

    def capture_end(self):
        if self.driver.current() is not self._stream:
            raise RuntimeError("capture_end must run on the capture stream")
        self.driver.end_capture(self._stream)
        if not self.keep_graph:
            self._instantiate_now()
            self.template = None  # destroyed

    def _instantiate_now(self):
        if self.python_instantiate:
            self.instantiate()
        else:
            self.graph_exec = self.driver.instantiate(self.template)

    def instantiate(self):
        if self.template is None:
            raise RuntimeError("no graph to instantiate")
        self.graph_exec = self.driver.instantiate(self.template)

    def replay(self):
        if self.graph_exec is None:
            self._instantiate_now()
        self.replays += 1

    def raw_cuda_graph(self) -> int:
        if self.template is None:
            raise RuntimeError("the graph was not kept (keep_graph=False)")
        return self.template.handle

    def raw_cuda_graph_exec(self) -> int:
        if self.graph_exec is None:
            raise RuntimeError("instantiate() has not been called")
        return self.graph_exec.handle


@contextlib.contextmanager
def capturing(cuda_graph: FakeCUDAGraph, stream: Optional[FakeStream] = None) -> Iterator[FakeStream]:
    """What ``torch.cuda.graph`` does: capture on a side stream made current."""
    driver = cuda_graph.driver
    stream = stream or driver.new_stream()
    with driver.use(stream):
        cuda_graph.capture_begin()
        try:
            yield stream
        finally:
            cuda_graph.capture_end()


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

# Each entry point calls the callback set for it (stand_in_set); which versions exist is
# chosen at compile time, as drivers differ.
_FORWARDING = r"""
#include <stddef.h>
#include <stdint.h>
static void *callbacks[7];
void stand_in_set(int which, void *callback) { callbacks[which] = callback; }
int cuGraphGetNodes(void *g, void **a, size_t *n) {
  return ((int (*)(void *, void **, size_t *))callbacks[0])(g, a, n); }
int cuGraphNodeGetType(void *node, int *t) { return ((int (*)(void *, int *))callbacks[1])(node, t); }
#ifndef NO_NODE_ID
int cuptiGetGraphNodeId(void *node, uint64_t *id) {
  return ((int (*)(void *, uint64_t *))callbacks[2])(node, id); }
#endif
#ifdef EDGE_DATA
int cuGraphNodeGetDependencies_v2(void *node, void **a, void *e, size_t *n) {
  return ((int (*)(void *, void **, void *, size_t *))callbacks[3])(node, a, e, n); }
#else
int cuGraphNodeGetDependencies(void *node, void **a, size_t *n) {
  return ((int (*)(void *, void **, size_t *))callbacks[3])(node, a, n); }
#endif
#if defined(GRAPH_EDGES) && defined(EDGE_DATA)
int cuGraphGetEdges_v2(void *g, void **from, void **to, void *e, size_t *n) {
  return ((int (*)(void *, void **, void **, void *, size_t *))callbacks[4])(g, from, to, e, n); }
#elif defined(GRAPH_EDGES)
int cuGraphGetEdges(void *g, void **from, void **to, size_t *n) {
  return ((int (*)(void *, void **, void **, size_t *))callbacks[4])(g, from, to, n); }
#endif
int cuGraphKernelNodeGetParams_v2(void *node, void *p) {
  return ((int (*)(void *, void *))callbacks[5])(node, p); }
int cuFuncGetName(const char **s, void *f) { return ((int (*)(const char **, void *))callbacks[6])(s, f); }
"""
_SLOTS = ("get_nodes", "node_type", "node_id", "dependencies", "edges", "kernel_params", "function_name")


def build_forwarding_library(directory: str, *, with_edges: bool, graph_edges: bool, node_ids: bool) -> str:
    """A forwarding library (``_FORWARDING``) compiled into ``directory`` with the
    driver's ``_v2`` entry points (edge data) or the older ones, with or without
    cuGraphGetEdges and cuptiGetGraphNodeId; loaded into the process (as ``ctypes``
    loads libcuda and libcupti) before its path is returned."""
    variant = (with_edges, graph_edges, node_ids)
    source = os.path.join(directory, "forwarding.c")
    if not os.path.exists(source):
        with open(source, "w") as out:
            out.write(_FORWARDING)
    path = os.path.join(directory, "libforwarding{}{}{}.so".format(*map(int, variant)))
    defines = [
        *(["-DEDGE_DATA"] if with_edges else []),
        *(["-DGRAPH_EDGES"] if graph_edges else []),
        *([] if node_ids else ["-DNO_NODE_ID"]),
    ]
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", *defines, "-o", path, source], check=True)
    ctypes.CDLL(path)
    return path


class NativeFakeDriver(FakeGraphDriver):
    """The fake driver whose capture-end walk goes through ``_cgfast._walk_graph``, as
    ``LibcudaGraphs.walk_topology`` does (and, with ``native_counts``, whose node counts
    go through ``_cgfast._graph_node_count``, as ``LibcudaGraphs.node_count`` does), on a
    forwarding library (``build_forwarding_library``, of the same ``with_edges`` and
    ``graph_edges``) whose entry points call ``ctypes`` callbacks over the fake."""

    def __init__(
        self, library: str, with_edges: bool = True, graph_edges: bool = True, native_counts: bool = False
    ) -> None:
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
            "edges": (_EDGES_V2 if with_edges else _EDGES_V1)(
                self._edges_v2 if with_edges else self._edges_v1
            ),
            "kernel_params": _PARAMS(self._kernel_params),
            "function_name": _NAME(self._function_name),
        }
        forwarding = ctypes.CDLL(library)
        forwarding.stand_in_set.argtypes = [ctypes.c_int, ctypes.c_void_p]
        for slot, name in enumerate(_SLOTS):
            forwarding.stand_in_set(slot, ctypes.cast(self._callbacks[name], ctypes.c_void_p))
        self.functions = _cgfast._resolve_graph_functions(library, library)
        if native_counts:
            self.node_count = functools.partial(_cgfast._graph_node_count, self.functions)  # type: ignore[method-assign]

    def walk_topology(self, graph: int, ids) -> Optional[tuple]:
        self.walks += 1
        return _cgfast._walk_graph(self.functions, graph)

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


@contextlib.contextmanager
def fake_driver(driver: Optional[FakeGraphDriver] = None) -> Iterator[FakeGraphDriver]:
    """A fresh fake driver (or ``driver``) as the backend, a fresh recorder, annotations
    off, and ``FakeCUDAGraph`` patched like ``install()`` patches torch's class (the
    ``fake`` fixture)."""
    driver = driver or FakeGraphDriver()
    runtime.reset()
    runtime.use_backend(driver.backend())
    patch_class(FakeCUDAGraph)
    try:
        yield driver
    finally:
        unpatch_class(FakeCUDAGraph)
        uninstall()
        runtime.reset()
