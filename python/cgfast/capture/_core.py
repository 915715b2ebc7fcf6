"""What gets recorded, independent of the driver that answers graph queries.

A scope snapshots its stream's capture frontier on entry and, on exit, walks only
the dependent edges added since, so it finds exactly the nodes created inside it.
Scopes are kept as (annotation, node ids) in the order they exit and merged into
the per-node registry at resolve. Node ids are ``graph_id << 32 | local_id``; the
registry indexes its keys by graph id so one graph is rekeyed (capture id -> exec id,
exec id -> next exec id) without touching any other graph's keys.
"""

from __future__ import annotations

import logging
import threading
import warnings
from types import MappingProxyType
from typing import Any, Dict, FrozenSet, Iterable, List, Mapping, NamedTuple, Optional, Set, Tuple

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
        self._pending: List[Tuple[Annotation, List[int]]] = []
        self._annotations: Dict[int, List[Annotation]] = {}
        self.annotations: Mapping[int, List[Annotation]] = MappingProxyType(self._annotations)
        self._keys_by_graph: Dict[int, Set[int]] = {}
        self._topology: Dict[int, List[TopologyNode]] = {}
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
        for node in created:
            node_type = backend.graphs.node_type(node)
            if node_type in ANNOTATABLE_KINDS:
                node_ids.append(backend.ids.node_id(node))
            elif node_type in NESTED_GRAPH_KINDS:
                kind = NESTED_GRAPH_KINDS[node_type]
                self.warn_once(
                    kind,
                    f"mark_kernels: a scope contains a {kind} node; the work inside it "
                    "lives in another graph whose node ids cannot be keyed, so it is "
                    "left unannotated",
                )
        if node_ids:
            node_ids.sort()
            with self._lock:
                self._pending.append((annotation, node_ids))

    def has_pending(self, graph_id: Optional[int] = None) -> bool:
        """Whether scopes wait to be resolved (that recorded nodes of ``graph_id``)."""
        with self._lock:
            if graph_id is None:
                return bool(self._pending)
            return any(node_ids[0] >> 32 == graph_id for _, node_ids in self._pending)

    # -- captures -------------------------------------------------------------------

    def capture_started(self, graph: int) -> None:
        with self._lock:
            self._capture_graphs.add(graph)

    def capture_ended(self, graph: int) -> None:
        with self._lock:
            self._capture_graphs.discard(graph)

    def resolve(self) -> None:
        """Merge pending scopes into the registry: one dict per node and resolve, the
        first recorded scope (the innermost) winning on common keys."""
        with self._lock:
            pending, self._pending = self._pending, []
            if not pending:
                return
            per_node: Dict[int, List[Annotation]] = {}
            for annotation, node_ids in pending:
                for node_id in node_ids:
                    per_node.setdefault(node_id, []).append(annotation)
            for node_id, scopes in per_node.items():
                recorded = self._annotations.get(node_id)
                if recorded:
                    # Resolved earlier while outer scopes were still open: those inner
                    # scopes exited first and keep winning.
                    scopes = [recorded[0], *scopes]
                merged = scopes[0] if len(scopes) == 1 else _merge_innermost_first(scopes)
                if recorded:
                    recorded[0] = merged
                else:
                    self._annotations[node_id] = [merged]
                    self._keys_by_graph.setdefault(node_id >> 32, set()).add(node_id)

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

    def drop_graphs(self, graph_ids: Iterable[int]) -> None:
        """Forget the annotations and topology of these graph ids."""
        ids = set(graph_ids)
        with self._lock:
            for graph_id in ids:
                for key in self._keys_by_graph.pop(graph_id, ()):
                    self._annotations.pop(key, None)
                self._topology.pop(graph_id, None)
            still_pending = []
            for annotation, node_ids in self._pending:
                kept = [node_id for node_id in node_ids if node_id >> 32 not in ids]
                if kept:
                    still_pending.append((annotation, kept))
            self._pending = still_pending

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()
            self._annotations.clear()
            self._keys_by_graph.clear()
            self._topology.clear()

    # -- topology -------------------------------------------------------------------

    def has_topology(self, graph_id: int) -> bool:
        return graph_id in self._topology

    def record_topology(self, backend: Backend, graph: int, graph_id: int) -> None:
        """One pass over ``graph``'s nodes: every annotatable node in local-id order with
        its kind, kernel launch and annotatable dependencies (through any other nodes)."""
        graphs, ids = backend.graphs, backend.ids
        local_ids: Dict[int, int] = {}
        kinds: Dict[int, int] = {}
        for node in graphs.nodes(graph):
            node_type = graphs.node_type(node)
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
        through = _DependencyCollapser(graphs, local_ids)
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

    def topology(self) -> Dict[int, List[Dict[str, Any]]]:
        with self._lock:
            recorded = list(self._topology.items())
        result = {}
        for graph_id, entries in recorded:
            high = graph_id << 32
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

    def report_failure(self, what: str) -> None:
        """Log a failed driver query (with its traceback) once; later ones at debug level.
        Annotation must never break the capture it annotates."""
        self._failures_reported += 1
        level = logging.WARNING if self._failures_reported == 1 else logging.DEBUG
        logger.log(level, "cgfast.capture: %s failed; its annotations are dropped", what, exc_info=True)


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

    def __init__(self, graphs: GraphDriver, local_ids: Mapping[int, int]) -> None:
        self._graphs = graphs
        self._local_ids = local_ids
        self._through: Dict[int, FrozenSet[int]] = {}  # other node -> annotatable ancestors
        self._deps: Dict[int, List[int]] = {}

    def annotatable_dependencies(self, node: int) -> Tuple[int, ...]:
        result: Set[int] = set()
        for dep in self._graphs.dependencies(node):
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
