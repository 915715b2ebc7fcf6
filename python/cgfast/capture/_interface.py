"""The small interface between the capture logic and whatever answers graph queries.

Three parts, each implemented by the real drivers (``_libcuda``, ``_id_sources``,
``_backend.TorchStreams``) and by the in-memory fake of the tests:

* :class:`GraphDriver` walks capture graphs (handles are plain ints);
* :class:`IdSource` turns nodes, graphs and executable graphs into the ids a
  profiler reports;
* :class:`StreamOps` says which stream is current and capturing, and switches streams.

Everything else (which nodes a scope created, merging, rekeying, topology) lives in
``_core`` and never talks to CUDA directly.
"""

from __future__ import annotations

import enum
from typing import ContextManager, List, NamedTuple, Optional, Protocol, Sequence, Tuple


class NodeType(enum.IntEnum):
    """``CUgraphNodeType`` values."""

    KERNEL = 0
    MEMCPY = 1
    MEMSET = 2
    HOST = 3
    GRAPH = 4
    EMPTY = 5
    WAIT_EVENT = 6
    EVENT_RECORD = 7
    EXT_SEMAS_SIGNAL = 8
    EXT_SEMAS_WAIT = 9
    MEM_ALLOC = 10
    MEM_FREE = 11
    BATCH_MEM_OP = 12
    CONDITIONAL = 13


# Node types that run work a profiler reports with a graph node id, and their names in
# the topology and the annotation file.
ANNOTATABLE_KINDS = {
    int(NodeType.KERNEL): "kernel",
    int(NodeType.MEMCPY): "memcpy",
    int(NodeType.MEMSET): "memset",
}

# Node types whose work lives in another cudaGraph_t (a child graph's body is keyed at
# capture end, see Recorder.record_topology; a conditional's cannot be).
NESTED_GRAPH_KINDS = {
    int(NodeType.GRAPH): "child graph",
    int(NodeType.CONDITIONAL): "conditional",
}

Dim3 = Tuple[int, int, int]


class KernelLaunch(NamedTuple):
    """What a kernel node launches: the (mangled) function name and its launch shape."""

    name: Optional[str]
    grid: Dim3
    block: Dim3


class CaptureState(NamedTuple):
    """A capturing stream's graph under construction and its current dependency nodes."""

    graph: int
    frontier: Sequence[int]


class GraphDriver(Protocol):
    def capture_state(self, stream: int) -> Optional[CaptureState]:
        """The capture ``stream`` is adding to, or ``None`` when it is not capturing."""

    def capture_graph(self, stream: int) -> Optional[int]:
        """The graph ``stream`` captures into (``None`` when it is not capturing)."""

    def node_count(self, graph: int) -> int:
        """How many nodes ``graph`` has: the local id its next node will get."""

    def root_nodes(self, graph: int) -> List[int]:
        """Nodes of ``graph`` without dependencies."""

    def nodes(self, graph: int) -> List[int]:
        """All nodes of ``graph``."""

    def dependents(self, node: int) -> List[int]:
        """Nodes that depend directly on ``node``."""

    def dependencies(self, node: int) -> List[int]:
        """Nodes ``node`` depends on directly."""

    def node_type(self, node: int) -> int:
        """The node's ``CUgraphNodeType``."""

    def kernel_launch(self, node: int) -> KernelLaunch:
        """Function name and launch dimensions of a kernel node."""

    def child_graph_body(self, node: int) -> int:
        """The graph a child-graph node runs (the copy embedded in its parent)."""


class IdSource(Protocol):
    name: str

    def node_id(self, node: int) -> int:
        """``graph_id << 32 | local_id`` of a node."""

    def graph_id(self, graph: int) -> int:
        """The per-process id of a ``cudaGraph_t``."""

    def exec_id(self, graph_exec: int) -> int:
        """The per-process id of a ``cudaGraphExec_t`` (same counter as graph ids)."""


class StreamOps(Protocol):
    def capturing_stream(self) -> Optional[int]:
        """The current stream's handle if it is capturing, else ``None`` (the hot check)."""

    def current_stream(self) -> int:
        """The current stream's handle."""

    def handle(self, stream: object) -> int:
        """The handle of a stream object (``torch.cuda.Stream.cuda_stream``)."""

    def use(self, stream: object) -> ContextManager[object]:
        """A context that makes ``stream`` current."""


class Backend(NamedTuple):
    """A working set of the three parts, and what to call it in ``backend()``."""

    graphs: GraphDriver
    ids: IdSource
    streams: StreamOps
    description: str
