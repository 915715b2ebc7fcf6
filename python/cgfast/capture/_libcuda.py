"""Graph traversal through ctypes on the CUDA driver (``libcuda.so.1``).

Chosen over cuda-bindings for traversal: it needs no extra package, works on every
driver from CUDA 12.0 on, and costs one foreign call per query (cuda-bindings wraps
every result in Python objects). Entry points are looked up by their versioned
symbol names (``cuda.h`` maps ``cuStreamGetCaptureInfo`` to ``_v3`` and so on), falling
back to the older version on drivers that lack the newer one.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, cast

from cgfast import _cgfast
from cgfast.capture._interface import CaptureState, KernelLaunch

logger = logging.getLogger("cgfast.capture")

_c_void_p = ctypes.c_void_p
_c_size_t = ctypes.c_size_t
_NODE_ARRAY = ctypes.POINTER(ctypes.c_void_p)

CAPTURE_STATUS_ACTIVE = 1
_EDGE_DATA_SIZE = 8  # sizeof(CUgraphEdgeData)
_SMALL_LIST = 8  # most nodes have at most this many edges
_SmallNodes = ctypes.c_void_p * _SMALL_LIST
_SmallEdges = ctypes.c_uint8 * (_EDGE_DATA_SIZE * _SMALL_LIST)


# ctypes reads a NULL void* as None; the driver fills these only on success, never with NULL.
def _handle(pointer: ctypes.c_void_p) -> int:
    return cast(int, pointer.value)


def _handles(buffer, count: int) -> List[int]:
    return cast(List[int], buffer[:count])


class CudaError(RuntimeError):
    def __init__(self, call: str, code: int, name: str) -> None:
        super().__init__(f"{call} failed: {name} ({code})")
        self.call = call
        self.code = code
        self.error_name = name


class _KernelNodeParams(ctypes.Structure):
    """``CUDA_KERNEL_NODE_PARAMS_v2``."""

    _fields_ = [
        ("func", ctypes.c_void_p),
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("kernelParams", ctypes.c_void_p),
        ("extra", ctypes.c_void_p),
        ("kern", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
    ]


class ProbeGraph(NamedTuple):
    """A throwaway graph with one empty node, and its instance when one could be made."""

    graph: int
    node: int
    graph_exec: Optional[int]


def _function(lib: ctypes.CDLL, names: tuple, argtypes: list) -> tuple:
    """The first of ``names`` the driver exports, with its argument types."""
    for name in names:
        try:
            fn = getattr(lib, name)
        except AttributeError:
            continue
        fn.argtypes = argtypes
        fn.restype = ctypes.c_int
        return name, fn
    raise OSError(f"libcuda exports none of {', '.join(names)}")


def _resolved(libcuda: str, libcupti: Optional[str] = None) -> Any:
    """The extension's own lookup of the graph functions in these loaded libraries, or
    ``None`` where it fails (the ctypes path then does everything)."""
    try:
        return _cgfast._resolve_graph_functions(libcuda, libcupti)
    except ValueError:
        logger.debug("cgfast.capture: no native graph walk on %s", libcuda, exc_info=True)
        return None


# One native walk's result: (node count, [(node id, node type, kernel name, dependencies as
# local ids, grid, block)] of the kernel/memcpy/memset nodes in local-id order, number of
# child-graph nodes; where there are any, the entries are left empty).
NativeWalk = tuple[int, list[tuple[int, int, Optional[str], list[int], Any, Any]], int]


class LibcudaGraphs:
    """:class:`~cgfast.capture._interface.GraphDriver` on the CUDA driver API."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        size_p = ctypes.POINTER(_c_size_t)
        self._error_name_fn = _function(
            lib, ("cuGetErrorName",), [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        )[1]
        init = _function(lib, ("cuInit",), [ctypes.c_uint])[1]
        self._check("cuInit", init(0))

        self._capture_info_name, self._capture_info = _function(
            lib,
            ("cuStreamGetCaptureInfo_v3", "cuStreamGetCaptureInfo_v2"),
            [
                _c_void_p,
                ctypes.POINTER(ctypes.c_int),
                ctypes.POINTER(ctypes.c_uint64),
                ctypes.POINTER(_c_void_p),
                ctypes.POINTER(_NODE_ARRAY),
                ctypes.POINTER(_c_void_p),
                size_p,
            ],
        )
        if self._capture_info_name.endswith("_v2"):  # no edge-data argument
            self._capture_info.argtypes = [a for i, a in enumerate(self._capture_info.argtypes) if i != 5]
        self._root_nodes = _function(lib, ("cuGraphGetRootNodes",), [_c_void_p, _NODE_ARRAY, size_p])[1]
        self._nodes = _function(lib, ("cuGraphGetNodes",), [_c_void_p, _NODE_ARRAY, size_p])[1]
        edge_lists = [_c_void_p, _NODE_ARRAY, _c_void_p, size_p]
        plain_lists = [_c_void_p, _NODE_ARRAY, size_p]
        name, self._dependents = _function(
            lib, ("cuGraphNodeGetDependentNodes_v2", "cuGraphNodeGetDependentNodes"), edge_lists
        )
        self._dependents_have_edges = name.endswith("_v2")
        if not self._dependents_have_edges:
            self._dependents.argtypes = plain_lists
        name, self._dependencies = _function(
            lib, ("cuGraphNodeGetDependencies_v2", "cuGraphNodeGetDependencies"), edge_lists
        )
        self._dependencies_have_edges = name.endswith("_v2")
        if not self._dependencies_have_edges:
            self._dependencies.argtypes = plain_lists
        self._node_type = _function(lib, ("cuGraphNodeGetType",), [_c_void_p, ctypes.POINTER(ctypes.c_int)])[
            1
        ]
        self._kernel_params = _function(
            lib, ("cuGraphKernelNodeGetParams_v2",), [_c_void_p, ctypes.POINTER(_KernelNodeParams)]
        )[1]
        # every edge of a graph in one call, for the native walk (CUDA >= 12.3 has _v2)
        self._edges_have_data = False
        self._edges = self._optional(
            "cuGraphGetEdges_v2", [_c_void_p, _NODE_ARRAY, _NODE_ARRAY, _c_void_p, size_p]
        )
        if self._edges is not None:
            self._edges_have_data = True
        else:
            self._edges = self._optional("cuGraphGetEdges", [_c_void_p, _NODE_ARRAY, _NODE_ARRAY, size_p])
        self._child_graph = self._optional(
            "cuGraphChildGraphNodeGetGraph", [_c_void_p, ctypes.POINTER(_c_void_p)]
        )
        name_out = [ctypes.POINTER(ctypes.c_char_p), _c_void_p]
        self._function_name = self._optional("cuFuncGetName", name_out)
        self._kernel_name = self._optional("cuKernelGetName", name_out)
        # Queries made once per module boundary or per node: per-thread out-parameters
        # made once, and a name per function handle read once per graph walk (a model
        # launches few distinct functions many times; a handle may be reused once its
        # module is unloaded, so names are not kept across walks).
        self._scratch = threading.local()
        self._names: dict = {}
        # The extension calls the driver itself, through functions it looks up in this
        # library (see graph_walk.rs): one native call per module boundary instead of a
        # ctypes call, and one per graph at capture end.
        native = _resolved(lib._name)
        if native is not None:
            self.node_count = functools.partial(_cgfast._graph_node_count, native)  # type: ignore[method-assign]
        # libcupti path -> its functions with the driver's for the walk (None: no walk)
        self._walks: Dict[str, Any] = {}

    def walk_topology(self, graph: int, ids: Any) -> Optional[NativeWalk]:
        """The whole graph in one native call (see :data:`NativeWalk`) when ``ids`` is an
        id source the extension can call itself (CUPTI's library); ``None`` otherwise."""
        libcupti = getattr(ids, "path", None)
        if libcupti is None:
            return None
        try:
            functions = self._walks[libcupti]
        except KeyError:
            functions = self._walks[libcupti] = _resolved(self._lib._name, libcupti)
        if functions is None:
            return None
        return _cgfast._walk_graph(functions, graph)

    def forget_function_names(self) -> None:
        """A new walk over a graph begins: function handles may have been reused."""
        self._names = {}

    def _scratch_space(self):
        space = getattr(self._scratch, "space", None)
        if space is None:
            count = _c_size_t()
            node_type = ctypes.c_int()
            params = _KernelNodeParams()
            space = self._scratch.space = (
                count,
                ctypes.byref(count),
                _SmallNodes(),
                _SmallEdges(),
                node_type,
                ctypes.byref(node_type),
                params,
                ctypes.byref(params),
            )
        return space

    @classmethod
    def load(cls) -> LibcudaGraphs:
        return cls(ctypes.CDLL("libcuda.so.1"))

    def _optional(self, name: str, argtypes: list):
        try:
            return _function(self._lib, (name,), argtypes)[1]
        except OSError:
            return None

    def _check(self, call: str, code: int) -> None:
        if code != 0:
            name = ctypes.c_char_p()
            if self._error_name_fn(code, ctypes.byref(name)) == 0 and name.value:
                error_name = name.value.decode()
            else:
                error_name = "unknown error"
            raise CudaError(call, code, error_name)

    # -- GraphDriver ----------------------------------------------------------------

    def capture_state(self, stream: int) -> Optional[CaptureState]:
        status = ctypes.c_int()
        capture_id = ctypes.c_uint64()
        graph = _c_void_p()
        deps = _NODE_ARRAY()
        edges = _c_void_p()
        count = _c_size_t()
        if self._capture_info_name.endswith("_v3"):
            code = self._capture_info(
                stream,
                ctypes.byref(status),
                ctypes.byref(capture_id),
                ctypes.byref(graph),
                ctypes.byref(deps),
                ctypes.byref(edges),
                ctypes.byref(count),
            )
        else:
            code = self._capture_info(
                stream,
                ctypes.byref(status),
                ctypes.byref(capture_id),
                ctypes.byref(graph),
                ctypes.byref(deps),
                ctypes.byref(count),
            )
        self._check(self._capture_info_name, code)
        if status.value != CAPTURE_STATUS_ACTIVE:
            return None
        return CaptureState(_handle(graph), [deps[i] for i in range(count.value)])

    def capture_graph(self, stream: int) -> Optional[int]:
        """The graph ``stream`` captures into, without reading its frontier."""
        status = ctypes.c_int()
        graph = _c_void_p()
        if self._capture_info_name.endswith("_v3"):
            code = self._capture_info(
                stream, ctypes.byref(status), None, ctypes.byref(graph), None, None, None
            )
        else:
            code = self._capture_info(stream, ctypes.byref(status), None, ctypes.byref(graph), None, None)
        self._check(self._capture_info_name, code)
        return graph.value if status.value == CAPTURE_STATUS_ACTIVE else None

    def node_count(self, graph: int) -> int:
        count, count_ref = self._scratch_space()[:2]
        count.value = 0
        code = self._nodes(graph, None, count_ref)
        if code:
            self._check("cuGraphGetNodes", code)
        return count.value

    def root_nodes(self, graph: int) -> List[int]:
        return self._graph_nodes("cuGraphGetRootNodes", self._root_nodes, graph)

    def nodes(self, graph: int) -> List[int]:
        return self._graph_nodes("cuGraphGetNodes", self._nodes, graph)

    def dependents(self, node: int) -> List[int]:
        return self._node_list(
            "cuGraphNodeGetDependentNodes", self._dependents, self._dependents_have_edges, node
        )

    def dependencies(self, node: int) -> List[int]:
        return self._node_list(
            "cuGraphNodeGetDependencies", self._dependencies, self._dependencies_have_edges, node
        )

    def node_type(self, node: int) -> int:
        space = self._scratch_space()
        code = self._node_type(node, space[5])
        if code:
            self._check("cuGraphNodeGetType", code)
        return space[4].value

    def kernel_launch(self, node: int) -> KernelLaunch:
        space = self._scratch_space()
        params = space[6]
        code = self._kernel_params(node, space[7])
        if code:
            self._check("cuGraphKernelNodeGetParams", code)
        name = None
        if params.func and self._function_name is not None:
            name = self._function_name_of(False, params.func)
        elif params.kern and self._kernel_name is not None:
            name = self._function_name_of(True, params.kern)
        return KernelLaunch(
            name,
            (params.gridDimX, params.gridDimY, params.gridDimZ),
            (params.blockDimX, params.blockDimY, params.blockDimZ),
        )

    def child_graph_body(self, node: int) -> int:
        if self._child_graph is None:
            raise CudaError("cuGraphChildGraphNodeGetGraph", 0, "not exported by this driver")
        graph = _c_void_p()
        self._check("cuGraphChildGraphNodeGetGraph", self._child_graph(node, ctypes.byref(graph)))
        return graph.value or 0

    # -- helpers --------------------------------------------------------------------

    def _function_name_of(self, is_kernel: bool, handle: int) -> Optional[str]:
        key = (is_kernel, handle)
        try:
            return self._names[key]
        except KeyError:
            getter = self._kernel_name if is_kernel else self._function_name
            name = self._names[key] = self._name_of(getter, handle)
            return name

    @staticmethod
    def _name_of(getter, handle: int) -> Optional[str]:
        name = ctypes.c_char_p()
        if getter(ctypes.byref(name), handle) != 0 or not name.value:
            return None
        return name.value.decode("utf-8", "replace")

    def _graph_nodes(self, call: str, fn, graph: int) -> List[int]:
        count = _c_size_t(0)
        self._check(call, fn(graph, None, ctypes.byref(count)))
        while count.value:
            capacity = count.value
            buffer = (_c_void_p * capacity)()
            self._check(call, fn(graph, buffer, ctypes.byref(count)))
            if count.value <= capacity:
                return _handles(buffer, count.value)
        return []

    def _node_list(self, call: str, fn, with_edges: bool, node: int) -> List[int]:
        # Most nodes have a few edges: ask with a small buffer and grow only when it
        # came back full (the driver fills at most the capacity it is given). Edge data
        # is asked for too, else edges with non-default data fail as a lossy query.
        count, count_ref, buffer, edges = self._scratch_space()[:4]
        count.value = _SMALL_LIST
        code = fn(node, buffer, edges, count_ref) if with_edges else fn(node, buffer, count_ref)
        if code:
            self._check(call, code)
        if count.value < _SMALL_LIST:
            return _handles(buffer, count.value)
        capacity = _SMALL_LIST * 4
        while True:
            buffer = (_c_void_p * capacity)()
            count = _c_size_t(capacity)
            if with_edges:
                edges = (ctypes.c_uint8 * (_EDGE_DATA_SIZE * capacity))()
                code = fn(node, buffer, edges, ctypes.byref(count))
            else:
                code = fn(node, buffer, ctypes.byref(count))
            self._check(call, code)
            if count.value < capacity:
                return _handles(buffer, count.value)
            capacity *= 4

    # -- a graph to try the id sources on -------------------------------------------

    @contextmanager
    def probe_graph(self, device: int, instantiate: bool) -> Iterator[ProbeGraph]:
        """A graph with one empty node (and, with ``instantiate``, its instance), made in
        ``device``'s primary context and destroyed on exit."""
        lib = self._lib
        dev = ctypes.c_int()
        self._check("cuDeviceGet", lib.cuDeviceGet(ctypes.byref(dev), ctypes.c_int(device)))
        context = _c_void_p()
        self._check("cuDevicePrimaryCtxRetain", lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), dev))
        graph = _c_void_p()
        graph_exec = _c_void_p()
        try:
            self._check("cuCtxPushCurrent", lib.cuCtxPushCurrent_v2(context))
            try:
                self._check("cuGraphCreate", lib.cuGraphCreate(ctypes.byref(graph), ctypes.c_uint(0)))
                node = _c_void_p()
                self._check(
                    "cuGraphAddEmptyNode",
                    lib.cuGraphAddEmptyNode(ctypes.byref(node), graph, None, _c_size_t(0)),
                )
                if instantiate:
                    self._check(
                        "cuGraphInstantiateWithFlags",
                        lib.cuGraphInstantiateWithFlags(
                            ctypes.byref(graph_exec), graph, ctypes.c_ulonglong(0)
                        ),
                    )
                yield ProbeGraph(_handle(graph), _handle(node), graph_exec.value if instantiate else None)
            finally:
                if graph_exec.value:
                    lib.cuGraphExecDestroy(graph_exec)
                if graph.value:
                    lib.cuGraphDestroy(graph)
                popped = _c_void_p()
                lib.cuCtxPopCurrent_v2(ctypes.byref(popped))
        finally:
            lib.cuDevicePrimaryCtxRelease_v2(dev)
