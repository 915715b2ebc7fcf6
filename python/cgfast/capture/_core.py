"""What gets recorded, independent of the driver that answers graph queries.

A scope snapshots its stream's capture frontier on entry and, on exit, walks only
the dependent edges added since, so it finds exactly the nodes created inside it.
Scopes are kept as (annotation, node ids) in the order they exit and merged into
the per-node registry at resolve. Node ids are ``graph_id << 32 | local_id``; the
registry indexes its keys by graph id so one graph is rekeyed (capture id -> exec id,
exec id -> next exec id) without touching any other graph's keys.
"""

from __future__ import annotations

import bisect
import functools
import logging
import threading
import warnings
from types import MappingProxyType
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, NamedTuple, Optional, Set, Tuple, Union

from cgfast.capture._interface import (
    ANNOTATABLE_KINDS,
    NESTED_GRAPH_KINDS,
    Backend,
    Dim3,
    GraphDriver,
    NodeType,
)

logger = logging.getLogger("cgfast.capture")

LOCAL_ID_MASK = 0xFFFFFFFF

Annotation = Dict[str, Any]


class ScopeStart(NamedTuple):
    """A capturing stream's state when a scope was entered."""

    graph: int
    frontier: Tuple[int, ...]
    # frontier node -> the dependents it already had at entry (those edges are old)
    known_dependents: Dict[int, FrozenSet[int]]
    # root nodes at entry, only needed when the frontier was empty
    entry_roots: FrozenSet[int]


class SpanStart(NamedTuple):
    """Where a span scope began: its graph and the local id of the next node."""

    graph: int
    graph_id: int
    first: int


class Span(NamedTuple):
    """The nodes a span scope created: local ids ``first <= id < end`` of a graph
    (local ids count a graph's nodes in creation order, so no walk is needed)."""

    graph_id: int
    first: int
    end: int


# Span(*fields) without the Python-level __new__ of a NamedTuple: once per module call
_new_span = functools.partial(tuple.__new__, Span)


BACKWARD = "backward"


class BackwardFrames(tuple):
    """Launch frames of nodes a backward pass captured: those of the forward op whose
    gradient they compute."""

    __slots__ = ()


class TopologyNode(NamedTuple):
    local_id: int
    kind: str
    name: Optional[str]
    deps: Tuple[int, ...]  # local ids of annotatable nodes
    grid: Optional[Dim3]
    block: Optional[Dim3]


class Recorder:
    """Pending scopes, the node id -> annotations registry and the recorded topology."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        # (annotation, node ids) of walked scopes and (annotation, Span) of span scopes,
        # in the order they exited (innermost first for nested scopes)
        self._pending: List[Tuple[Annotation, Any]] = []
        # graph id -> local ids of its annotatable nodes, once its capture has ended:
        # what a span resolves against
        self._annotatable_local_ids: Dict[int, List[int]] = {}
        # graph id -> local id of a child-graph node -> the local ids its body's kernel,
        # memcpy and memset nodes have in the graph's instance (see record_topology)
        self._child_bodies: Dict[int, Dict[int, List[int]]] = {}
        self._graph_ids: Dict[int, int] = {}  # capture graph handle -> its id
        # launch stacks: (Span, frames) waiting for their graph's capture to end, and
        # graph id -> local id -> frames (innermost first)
        self._pending_stacks: List[Tuple[Span, Tuple[str, ...]]] = []
        self._stacks: Dict[int, Dict[int, Tuple[str, ...]]] = {}
        # op counts: (Span, FLOPs, bytes) waiting for their graph's capture to end, and
        # graph id -> local id -> (FLOPs, bytes)
        self._pending_op_counts: List[Tuple[Span, int, int]] = []
        self._op_counts: Dict[int, Dict[int, Tuple[int, int]]] = {}
        self._annotations: Dict[int, List[Annotation]] = {}
        self.annotations: Mapping[int, List[Annotation]] = MappingProxyType(self._annotations)
        self._keys_by_graph: Dict[int, Set[int]] = {}
        self._topology: Dict[int, Union[List[TopologyNode], _WalkedNodes]] = {}
        # Top-level graphs of captures that are being recorded: a scope whose stream
        # captures into any other graph is inside a conditional body.
        self._capture_graphs: Set[int] = set()
        self._warned: Set[str] = set()
        self._failures_reported = 0

    # -- scopes ---------------------------------------------------------------------

    def begin_scope(self, backend: Backend, stream: int) -> Optional[ScopeStart]:
        graphs = backend.graphs
        state = graphs.capture_state(stream)
        if state is None:
            return None
        graph, frontier = state
        if self._capture_graphs and graph not in self._capture_graphs:
            self.warn_once(
                "conditional body",
                "mark_kernels: this scope is inside the body of a CUDA graph conditional "
                "node (torch.cond / torch.while_loop), captured into a separate graph "
                "whose node ids are never remapped to the executable graph; nothing is "
                "recorded for it",
            )
            return None
        if frontier:
            frontier = tuple(frontier)
            known = {node: frozenset(graphs.dependents(node)) for node in frontier}
            return ScopeStart(graph, frontier, known, frozenset())
        # No work on this stream yet, so its first node may hang off nothing (a new
        # root) or off any node that exists now (joined from a stream that forked at
        # the capture's start): remember every node's dependents. Only streams forked
        # from this empty origin can have added nodes yet, so there are few.
        known = {node: frozenset(graphs.dependents(node)) for node in graphs.nodes(graph)}
        return ScopeStart(graph, (), known, frozenset(graphs.root_nodes(graph)))

    def end_scope(self, backend: Backend, start: ScopeStart, annotation: Annotation) -> None:
        created = _nodes_created_since(backend.graphs, start)
        node_ids = []
        children = []
        for node in created:
            node_type = backend.graphs.node_type(node)
            if node_type in ANNOTATABLE_KINDS:
                node_ids.append(backend.ids.node_id(node))
            elif node_type == NodeType.GRAPH:
                # its body's nodes are known at capture end: a span of the child node claims them
                child_id = backend.ids.node_id(node)
                local_id = child_id & LOCAL_ID_MASK
                children.append(Span(child_id >> 32, local_id, local_id + 1))
            elif node_type in NESTED_GRAPH_KINDS:
                kind = NESTED_GRAPH_KINDS[node_type]
                self.warn_once(
                    kind,
                    f"mark_kernels: a scope contains a {kind} node; the work inside it "
                    "lives in another graph whose node ids cannot be keyed, so it is "
                    "left unannotated",
                )
        if node_ids or children:
            node_ids.sort()
            with self._lock:
                if node_ids:
                    self._pending.append((annotation, node_ids))
                self._pending.extend((annotation, child) for child in children)

    def begin_span(self, backend: Backend, stream: int) -> Optional[SpanStart]:
        """Note the graph ``stream`` captures into and how many nodes it has. ``None``
        outside a capture and inside conditional bodies (their ids are never remapped)."""
        graphs = backend.graphs
        graph = graphs.capture_graph(stream)
        if graph is None:
            return None
        graph_id = self._graph_ids.get(graph)
        if graph_id is None:
            if self._capture_graphs and graph not in self._capture_graphs:
                self.warn_once(
                    "conditional body",
                    "cgfast.capture: a scope inside the body of a CUDA graph conditional "
                    "node (torch.cond / torch.while_loop) records nothing: the body is a "
                    "separate graph whose node ids are never remapped to the executable graph",
                )
                return None
            graph_id = self._graph_ids[graph] = backend.ids.graph_id(graph)
        return SpanStart(graph, graph_id, graphs.node_count(graph))

    def forget_graph_ids(self) -> None:
        """Forget which id each graph handle has (a capture began or ended: a handle may
        be reused by a new graph)."""
        self._graph_ids.clear()

    def is_capture_graph(self, graph: int) -> bool:
        """Whether ``graph`` is the top-level graph of a capture being recorded."""
        return graph in self._capture_graphs

    def end_span(self, backend: Backend, start: SpanStart, annotation: Annotation) -> int:
        """Record the nodes created since ``start``; returns the graph's node count now."""
        end = backend.graphs.node_count(start.graph)
        self.add_span(start.graph_id, start.first, end, annotation)
        return end

    def add_span(self, graph_id: int, first: int, end: int, annotation: Annotation) -> None:
        """Record local ids ``first <= id < end`` of graph ``graph_id`` (nothing when empty)."""
        if end > first:
            with self._lock:
                self._pending.append((annotation, Span(graph_id, first, end)))

    def add_segments(
        self, graph_id: int, first: int, end: int, segments: Optional[list], annotation: Annotation
    ) -> None:
        """``add_span`` of ``first <= id < end`` and of each ``(first, end)`` of ``segments``."""
        with self._lock:
            pending = self._pending
            if end > first:
                pending.append((annotation, _new_span((graph_id, first, end))))
            if segments is not None:
                for segment_first, segment_end in segments:
                    if segment_end > segment_first:
                        pending.append((annotation, _new_span((graph_id, segment_first, segment_end))))

    def add_stack(self, span: Span, frames: Tuple[str, ...]) -> None:
        """The nodes of ``span`` were launched from ``frames`` (innermost first; a
        :class:`BackwardFrames` for nodes of a backward pass)."""
        with self._lock:
            self._pending_stacks.append((span, frames))

    def stacks(self) -> Dict[int, List[str]]:
        """Node id -> launch frames of every resolved node (a new dict)."""
        with self._lock:
            return {
                graph_id << 32 | local_id: list(frames)
                for graph_id, by_local_id in self._stacks.items()
                for local_id, frames in by_local_id.items()
            }

    def launch_phases(self) -> Dict[int, str]:
        """Node id -> ``"backward"`` for the resolved nodes whose frames are those of the
        forward op whose gradient they compute (a new dict)."""
        with self._lock:
            return {
                graph_id << 32 | local_id: BACKWARD
                for graph_id, by_local_id in self._stacks.items()
                for local_id, frames in by_local_id.items()
                if type(frames) is BackwardFrames
            }

    def _resolve_stacks(self) -> None:
        waiting = []
        graphs: Dict[int, _GraphNodes] = {}
        for span, frames in self._pending_stacks:
            if span.graph_id not in self._annotatable_local_ids:
                waiting.append((span, frames))
                continue
            by_local_id = self._stacks.setdefault(span.graph_id, {})
            for node_id in self._graph_nodes(span.graph_id, graphs).of_span(span.first, span.end):
                by_local_id.setdefault(node_id & LOCAL_ID_MASK, frames)
        self._pending_stacks = waiting

    def add_op_counts(self, span: Span, flops: int, nbytes: int) -> None:
        """One op created the nodes of ``span``, counting ``flops`` and ``nbytes``. The
        counts go whole on its first kernel, memcpy or memset node and 0 on the others:
        the sum over any set of whole ops stays exact in integers, and which of an op's
        kernels did the work is not known (a matmul's memset and GEMM alike)."""
        with self._lock:
            self._pending_op_counts.append((span, flops, nbytes))

    def op_counts(self) -> Dict[int, Dict[str, int]]:
        """Node id -> ``{"flops": ..., "bytes": ...}`` of every resolved node an op
        created while counts were recorded (a new dict)."""
        with self._lock:
            return {
                graph_id << 32 | local_id: {"flops": flops, "bytes": nbytes}
                for graph_id, by_local_id in self._op_counts.items()
                for local_id, (flops, nbytes) in by_local_id.items()
            }

    def _resolve_op_counts(self) -> None:
        waiting = []
        graphs: Dict[int, _GraphNodes] = {}
        for span, flops, nbytes in self._pending_op_counts:
            if span.graph_id not in self._annotatable_local_ids:
                waiting.append((span, flops, nbytes))
                continue
            node_ids = self._graph_nodes(span.graph_id, graphs).of_span(span.first, span.end)
            by_local_id = self._op_counts.setdefault(span.graph_id, {})
            for index, node_id in enumerate(node_ids):
                by_local_id.setdefault(node_id & LOCAL_ID_MASK, (flops, nbytes) if index == 0 else (0, 0))
        self._pending_op_counts = waiting

    def has_pending(self, graph_id: Optional[int] = None) -> bool:
        """Whether scopes wait to be resolved (that recorded nodes of ``graph_id``)."""
        with self._lock:
            if graph_id is None:
                return bool(self._pending)
            return any(_graph_of(nodes) == graph_id for _, nodes in self._pending)

    # -- captures -------------------------------------------------------------------

    def capture_started(self, graph: int) -> None:
        with self._lock:
            self._capture_graphs.add(graph)

    def capture_ended(self, graph: int) -> None:
        with self._lock:
            self._capture_graphs.discard(graph)
            self._graph_ids.pop(graph, None)

    def note_annotatable_nodes(self, backend: Backend, graph: int, graph_id: int) -> None:
        """Read which local ids of ``graph`` (its capture over) are kernels, memcpys and
        memsets, so that its spans can be resolved; ``record_topology`` does it too."""
        graphs, ids = backend.graphs, backend.ids
        nodes = graphs.nodes(graph)
        local_ids = [
            ids.node_id(node) & LOCAL_ID_MASK for node in nodes if graphs.node_type(node) in ANNOTATABLE_KINDS
        ]
        self.set_annotatable(graph_id, local_ids, len(nodes))

    def set_annotatable(self, graph_id: int, local_ids: List[int], node_count: int) -> None:
        local_ids.sort()
        if local_ids and local_ids[-1] >= node_count:
            # Local ids are not creation indices here: spans cannot be trusted.
            self.warn_once(
                "span ids",
                f"cgfast.capture: graph {graph_id}'s node ids are not numbered in creation "
                "order; module annotations of it are dropped",
            )
            local_ids = []
        with self._lock:
            self._annotatable_local_ids[graph_id] = local_ids

    def forget_annotatable_nodes(self, graph_id: int) -> None:
        with self._lock:
            self._annotatable_local_ids.pop(graph_id, None)
            self._child_bodies.pop(graph_id, None)

    def _graph_nodes(self, graph_id: int, known: Dict[int, _GraphNodes]) -> _GraphNodes:
        """What finds the node ids of ``graph_id``'s spans, made once per ``known``."""
        found = known.get(graph_id)
        if found is None:
            local_ids = self._annotatable_local_ids[graph_id]
            found = known[graph_id] = _GraphNodes(graph_id, local_ids, self._child_bodies.get(graph_id))
        return found

    def resolve(self) -> None:
        """Merge pending scopes into the registry: one dict per node and resolve, the
        first recorded scope (the innermost) winning on common keys. Scopes of a graph
        with spans still waiting for its capture to end wait with them, so the order
        in which nested scopes exited decides."""
        with self._lock:
            if self._pending_stacks:
                self._resolve_stacks()
            if self._pending_op_counts:
                self._resolve_op_counts()
            pending, self._pending = self._pending, []
            if not pending:
                return
            waiting = {
                nodes.graph_id
                for _, nodes in pending
                if type(nodes) is Span and nodes.graph_id not in self._annotatable_local_ids
            }
            if waiting:
                self._pending = [entry for entry in pending if _graph_of(entry[1]) in waiting]
                pending = [entry for entry in pending if _graph_of(entry[1]) not in waiting]
            # Most nodes are in one scope (a module's spans leave out its children's
            # nodes): those keep that scope's annotation, the others' are merged.
            first_scope: Dict[int, Annotation] = {}
            more_scopes: Dict[int, List[Annotation]] = {}
            graphs: Dict[int, _GraphNodes] = {}
            for annotation, nodes in pending:
                if type(nodes) is Span:
                    graph_id, first, end = nodes
                    graph = graphs.get(graph_id) or self._graph_nodes(graph_id, graphs)
                    nodes = graph.of_span(first, end)
                for node_id in nodes:
                    if node_id in first_scope:
                        more_scopes.setdefault(node_id, [first_scope[node_id]]).append(annotation)
                    else:
                        first_scope[node_id] = annotation
            annotations, keys_by_graph = self._annotations, self._keys_by_graph
            keys, keys_graph = set(), None
            for node_id, merged in first_scope.items():
                scopes = more_scopes.get(node_id) if more_scopes else None
                recorded = annotations.get(node_id)
                if recorded:
                    # Resolved earlier while outer scopes were still open: those inner
                    # scopes exited first and keep winning.
                    recorded[0] = _merge_innermost_first([recorded[0], *(scopes or [merged])])
                    continue
                annotations[node_id] = [merged if scopes is None else _merge_innermost_first(scopes)]
                if node_id >> 32 != keys_graph:
                    keys_graph = node_id >> 32
                    keys = keys_by_graph.setdefault(keys_graph, set())
                keys.add(node_id)

    def rekey(self, old_graph_id: int, new_graph_id: int) -> None:
        """Move everything keyed by ``old_graph_id`` to ``new_graph_id``."""
        if old_graph_id == new_graph_id:
            return
        high = new_graph_id << 32
        with self._lock:
            keys = self._keys_by_graph.pop(old_graph_id, None)
            if keys:
                moved = self._keys_by_graph.setdefault(new_graph_id, set())
                for key in keys:
                    scopes = self._annotations.pop(key)
                    new_key = high | (key & LOCAL_ID_MASK)
                    existing = self._annotations.get(new_key)
                    if existing is None:
                        self._annotations[new_key] = scopes
                    else:
                        existing.extend(scopes)
                    moved.add(new_key)
            topology = self._topology.pop(old_graph_id, None)
            if topology is not None:
                self._topology[new_graph_id] = topology
            stacks = self._stacks.pop(old_graph_id, None)
            if stacks is not None:
                self._stacks[new_graph_id] = stacks
            op_counts = self._op_counts.pop(old_graph_id, None)
            if op_counts is not None:
                self._op_counts[new_graph_id] = op_counts

    def drop_graphs(self, graph_ids: Iterable[int]) -> None:
        """Forget the annotations and topology of these graph ids."""
        ids = set(graph_ids)
        with self._lock:
            for graph_id in ids:
                for key in self._keys_by_graph.pop(graph_id, ()):
                    self._annotations.pop(key, None)
                self._topology.pop(graph_id, None)
            still_pending = []
            for annotation, nodes in self._pending:
                kept: Span | List[int] | None
                if type(nodes) is Span:
                    kept = nodes if nodes.graph_id not in ids else None
                else:
                    kept = [node_id for node_id in nodes if node_id >> 32 not in ids]
                if kept:
                    still_pending.append((annotation, kept))
            self._pending = still_pending
            for graph_id in ids:
                self._annotatable_local_ids.pop(graph_id, None)
                self._child_bodies.pop(graph_id, None)
                self._stacks.pop(graph_id, None)
                self._op_counts.pop(graph_id, None)
            self._pending_stacks = [entry for entry in self._pending_stacks if entry[0].graph_id not in ids]
            self._pending_op_counts = [
                entry for entry in self._pending_op_counts if entry[0].graph_id not in ids
            ]

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()
            self._pending_stacks.clear()
            self._stacks.clear()
            self._pending_op_counts.clear()
            self._op_counts.clear()
            self._annotatable_local_ids.clear()
            self._child_bodies.clear()
            self._graph_ids.clear()
            self._annotations.clear()
            self._keys_by_graph.clear()
            self._topology.clear()

    # -- topology -------------------------------------------------------------------

    def has_topology(self, graph_id: int) -> bool:
        return graph_id in self._topology

    def record_topology(self, backend: Backend, graph: int, graph_id: int) -> None:
        """One pass over ``graph``'s nodes: every annotatable node in local-id order with
        its kind, kernel launch and annotatable dependencies (through any other nodes),
        the nodes of child-graph bodies included (see ``_child_graph_bodies``)."""
        graphs, ids = backend.graphs, backend.ids
        walk_topology = getattr(graphs, "walk_topology", None)
        walked = walk_topology(graph, ids) if walk_topology is not None else None
        if walked is not None and not walked[2]:  # no child graphs: the native walk did it all
            self._record_walked_topology(graph_id, walked[0], walked[1])
            return
        forget_function_names = getattr(graphs, "forget_function_names", None)
        if forget_function_names is not None:
            forget_function_names()
        local_ids: Dict[int, int] = {}
        kinds: Dict[int, int] = {}
        nodes = graphs.nodes(graph)
        children = []
        for node in nodes:
            node_type = graphs.node_type(node)
            if node_type == NodeType.GRAPH:
                children.append(node)
            if node_type not in ANNOTATABLE_KINDS:
                continue
            node_id = ids.node_id(node)
            if node_id >> 32 != graph_id:
                raise RuntimeError(
                    f"node id {node_id:#x} does not belong to graph {graph_id}: the id "
                    f"source {ids.name!r} numbers nodes differently than expected"
                )
            local_ids[node] = node_id & LOCAL_ID_MASK
            kinds[node] = node_type
        overrides: Dict[int, List[int]] = {}
        bodies = self._child_graph_bodies(backend, nodes, children, local_ids, kinds, overrides)
        instance_nodes = len(nodes) + sum(count for _, count in bodies.values())
        self.set_annotatable(graph_id, list(local_ids.values()), instance_nodes)
        with self._lock:
            if bodies:
                self._child_bodies[graph_id] = {child: body for child, (body, _) in bodies.items()}
        through = _DependencyCollapser(graphs, local_ids, overrides)
        entries = []
        for node in sorted(local_ids, key=local_ids.__getitem__):
            deps = through.annotatable_dependencies(node)
            if kinds[node] == NodeType.KERNEL:
                launch = graphs.kernel_launch(node)
                entry = TopologyNode(local_ids[node], "kernel", launch.name, deps, launch.grid, launch.block)
            else:
                entry = TopologyNode(local_ids[node], ANNOTATABLE_KINDS[kinds[node]], None, deps, None, None)
            entries.append(entry)
        with self._lock:
            self._topology[graph_id] = entries

    def _child_graph_bodies(
        self,
        backend: Backend,
        nodes: List[int],
        children: List[int],
        local_ids: Dict[int, int],
        kinds: Dict[int, int],
        overrides: Dict[int, List[int]],
    ) -> Dict[int, Tuple[List[int], int]]:
        """Add the kernel, memcpy and memset nodes of child-graph bodies to ``local_ids``
        with the local ids CUPTI reports for them in the graph's instance (measured on the
        H200, tools/probe_graph_bodies.py: after the graph's own nodes, body by body in
        the order of the child nodes' local ids), and to ``overrides`` the edges that
        join a body to its parent graph. Returns child local id -> (its body's annotatable
        local ids, its body's node count). Bodies holding child graphs or conditionals of
        their own, and graphs with conditional nodes, keep their bodies unannotated."""
        if not children:
            return {}
        graphs, ids = backend.graphs, backend.ids
        if any(graphs.node_type(node) == NodeType.CONDITIONAL for node in nodes):
            self.warn_once(
                "bodies",
                "cgfast.capture: a graph with both child-graph and conditional nodes keeps its "
                "child-graph bodies unannotated (their ids in its instance were not measured)",
            )
            return {}
        found = []
        for child in children:
            body = graphs.child_graph_body(child)
            body_nodes = graphs.nodes(body)
            body_types = [graphs.node_type(node) for node in body_nodes]
            if any(kind in NESTED_GRAPH_KINDS for kind in body_types):
                self.warn_once(
                    "bodies",
                    "cgfast.capture: a child graph whose body holds child graphs or conditionals "
                    "of its own keeps its graph's child-graph bodies unannotated",
                )
                return {}
            found.append((ids.node_id(child) & LOCAL_ID_MASK, child, body_nodes, body_types))
        bodies: Dict[int, Tuple[List[int], int]] = {}
        offset = len(nodes)
        for child_local_id, child, body_nodes, body_types in sorted(found, key=lambda entry: entry[0]):
            annotatable = []
            depended_on = set()
            for node, kind in zip(body_nodes, body_types):
                deps = graphs.dependencies(node)
                depended_on.update(deps)
                if not deps:
                    overrides[node] = graphs.dependencies(child)  # a body root follows its child node
                if kind in ANNOTATABLE_KINDS:
                    local_id = offset + (ids.node_id(node) & LOCAL_ID_MASK)
                    local_ids[node] = local_id
                    kinds[node] = kind
                    annotatable.append(local_id)
            # what follows the child node follows its body's last nodes
            overrides[child] = [node for node in body_nodes if node not in depended_on]
            bodies[child_local_id] = (sorted(annotatable), len(body_nodes))
            offset += len(body_nodes)
        return bodies

    def _record_walked_topology(self, graph_id: int, node_count: int, walked: list[tuple]) -> None:
        """``record_topology`` from one native walk (the driver's ``walk_topology``): its
        rows are kept as they are, and read as entries when the topology is asked for."""
        local_ids = []
        for node_id, node_type, *_ in walked:
            if node_id >> 32 != graph_id:
                raise RuntimeError(
                    f"node id {node_id:#x} does not belong to graph {graph_id}: the id "
                    "source numbers nodes differently than expected"
                )
            if node_type not in ANNOTATABLE_KINDS:
                raise RuntimeError(
                    f"the native walk gave a node of type {node_type}, not a kernel, memcpy or memset"
                )
            local_ids.append(node_id & LOCAL_ID_MASK)
        self.set_annotatable(graph_id, local_ids, node_count)
        with self._lock:
            self._topology[graph_id] = _WalkedNodes(walked)

    def topology(self) -> Dict[int, List[Dict[str, Any]]]:
        with self._lock:
            recorded = list(self._topology.items())
        result = {}
        for graph_id, recorded_entries in recorded:
            high = graph_id << 32
            entries = (
                [_entry_of_walked(row) for row in recorded_entries]
                if type(recorded_entries) is _WalkedNodes
                else recorded_entries
            )
            result[graph_id] = [
                {
                    "id": high | entry.local_id,
                    "type": entry.kind,
                    "name": entry.name,
                    "deps": [high | dep for dep in entry.deps],
                    "grid": list(entry.grid) if entry.grid is not None else None,
                    "block": list(entry.block) if entry.block is not None else None,
                }
                for entry in entries
            ]
        return result

    # -- reporting ------------------------------------------------------------------

    def warn_once(self, topic: str, message: str) -> None:
        if topic in self._warned:
            return
        self._warned.add(topic)
        warnings.warn(message, RuntimeWarning, stacklevel=4)

    def report_failure(self, what: str, exc_info: Any = True) -> None:
        """Log a failed driver query (with its traceback: ``exc_info`` as ``logging``
        takes it) once; later ones at debug level. Annotation must never break the
        capture it annotates (see ``_runtime.never_raises``)."""
        self._failures_reported += 1
        level = logging.WARNING if self._failures_reported == 1 else logging.DEBUG
        logger.log(level, "cgfast.capture: %s failed; its annotations are dropped", what, exc_info=exc_info)


class _WalkedNodes(list):
    """A graph's topology as the native walk gave it: rows ``(node id, node type, kernel
    name, local ids of dependencies, grid, block)``, made entries when read."""

    __slots__ = ()


def _entry_of_walked(row: tuple) -> TopologyNode:
    node_id, node_type, name, deps, grid, block = row
    return TopologyNode(
        node_id & LOCAL_ID_MASK,
        ANNOTATABLE_KINDS[node_type],
        name,
        tuple(deps),
        tuple(grid) if grid is not None else None,  # type: ignore[arg-type]
        tuple(block) if block is not None else None,  # type: ignore[arg-type]
    )


def _graph_of(nodes: Any) -> int:
    """The graph id of a pending scope's nodes (a Span, or sorted node ids)."""
    return nodes.graph_id if type(nodes) is Span else nodes[0] >> 32


class _GraphNodes:
    """A graph's annotatable node ids in local-id order (those of child-graph bodies
    by their child node's local id), to find the nodes of its spans."""

    __slots__ = ("bodies", "local_ids", "node_ids")

    def __init__(self, graph_id: int, local_ids: List[int], bodies: Optional[Dict[int, List[int]]]) -> None:
        high = graph_id << 32
        self.local_ids = local_ids
        self.node_ids = [high | local_id for local_id in local_ids]
        self.bodies = (
            [(child, [high | local_id for local_id in body]) for child, body in bodies.items()]
            if bodies
            else None
        )

    def of_span(self, first: int, end: int) -> List[int]:
        """The node ids of local ids ``first <= id < end`` and of the bodies of child
        nodes among them."""
        local_ids = self.local_ids
        lo = bisect.bisect_left(local_ids, first)
        node_ids = self.node_ids[lo : bisect.bisect_left(local_ids, end, lo)]
        if self.bodies:
            for child, body in self.bodies:
                if first <= child < end:
                    node_ids.extend(body)
        return node_ids


def _merge_innermost_first(scopes: List[Annotation]) -> Annotation:
    merged: Annotation = {}
    for annotation in scopes:
        for key, value in annotation.items():
            merged.setdefault(key, value)
    return merged


def _nodes_created_since(graphs: GraphDriver, start: ScopeStart) -> List[int]:
    """Nodes reachable from the entry frontier through edges that did not exist at entry
    (or, when the frontier was empty, from every node of the graph at entry and from
    the new roots)."""
    if start.frontier:
        found: List[int] = []
        stack = list(start.frontier)
        seen = set(stack)
    else:
        found = [root for root in graphs.root_nodes(start.graph) if root not in start.entry_roots]
        stack = [*found, *start.known_dependents]
        seen = set(stack)
    known = start.known_dependents
    while stack:
        node = stack.pop()
        old = known.get(node, ())
        for dependent in graphs.dependents(node):
            if dependent in seen or dependent in old:
                continue
            seen.add(dependent)
            found.append(dependent)
            stack.append(dependent)
    return found


class _DependencyCollapser:
    """Dependencies of annotatable nodes, looking through every other node (events,
    empty joins, allocations, child graphs) transitively; memoized and iterative."""

    def __init__(
        self,
        graphs: GraphDriver,
        local_ids: Mapping[int, int],
        overrides: Optional[Dict[int, List[int]]] = None,
    ) -> None:
        self._graphs = graphs
        self._local_ids = local_ids
        self._through: Dict[int, FrozenSet[int]] = {}  # other node -> annotatable ancestors
        # node -> its dependencies where the graph's edges do not say them (child-graph bodies)
        self._deps: Dict[int, List[int]] = dict(overrides) if overrides else {}

    def annotatable_dependencies(self, node: int) -> Tuple[int, ...]:
        result: Set[int] = set()
        for dep in self._dependencies_of(node):
            local_id = self._local_ids.get(dep)
            if local_id is not None:
                result.add(local_id)
            else:
                result.update(self._ancestors_through(dep))
        return tuple(sorted(result))

    def _dependencies_of(self, node: int) -> List[int]:
        deps = self._deps.get(node)
        if deps is None:
            deps = self._deps[node] = self._graphs.dependencies(node)
        return deps

    def _ancestors_through(self, start: int) -> FrozenSet[int]:
        done = self._through
        if start in done:
            return done[start]
        stack = [(start, False)]
        while stack:
            node, expanded = stack.pop()
            if node in done:
                continue
            deps = self._dependencies_of(node)
            if not expanded:
                stack.append((node, True))
                stack.extend((dep, False) for dep in deps if dep not in self._local_ids and dep not in done)
                continue
            ancestors: Set[int] = set()
            for dep in deps:
                local_id = self._local_ids.get(dep)
                if local_id is not None:
                    ancestors.add(local_id)
                else:
                    ancestors.update(done[dep])
            done[node] = frozenset(ancestors)
        return done[start]
