"""What a kernel launch is annotated with, from the FX nodes it was generated from.

IR origins are noisy: a buffer's ``origins`` also hold the producers inlined into it
and, when a consumer forced its realisation, that consumer. So a kernel takes the
``origin_node`` of each buffer it computes plus those inlined origins that no other
kernel computes; an extern kernel takes its ``origin_node`` (or the origins calling
its op) alone.
"""

from __future__ import annotations

import operator
import re
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Optional

import torch.fx

Annotation = dict[str, str]

# Keys Inductor itself keeps in node.meta["custom"]: scheduling hints, not user labels.
INDUCTOR_CUSTOM_KEYS = frozenset(
    {
        "stream",
        "mempool",
        "mempool_device",
        "nested_region_config",
        "call_id",
        "fallback_to_eager",
    }
)

_SOURCE_ROOT = re.compile(r"[LG]\[(['\"])(?:(?!\1).)*\1\]")
_SOURCE_STEP = re.compile(r"\.(\w+)|\[(-?\d+)\]|\[(['\"])((?:(?!\3).)*)\3\]")
# Dynamo may spell `self.layers[0]` as `self._modules['layers']._modules['0']`.
_CONTAINER_ATTRS = frozenset({"_modules", "_parameters", "_buffers"})


def module_path(source: str) -> str:
    """The dotted attribute path of a module from its ``nn_module_stack`` source name:
    ``L['self'].layers[0].proj`` -> ``layers.0.proj``; the root module is ``""``."""
    root = _SOURCE_ROOT.match(source)
    position = root.end() if root else 0
    steps: list[str] = []
    if root is None:
        head = re.match(r"\w+", source)
        if head is None:
            return source
        steps.append(head.group())
        position = head.end()
    while position < len(source):
        step = _SOURCE_STEP.match(source, position)
        if step is None:  # an unfamiliar spelling: keep it readable rather than drop it
            return ".".join([*steps, source[position:].lstrip(".")])
        name = next(g for g in (step.group(1), step.group(2), step.group(4)) if g is not None)
        if name not in _CONTAINER_ATTRS:
            steps.append(name)
        position = step.end()
    return ".".join(steps)


def innermost_module(node: torch.fx.Node) -> Optional[list[str]]:
    """Path segments of the innermost module that produced ``node``; backward nodes
    carry their forward node's stack as ``fwd_nn_module_stack``."""
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack")
    if not stack:
        return None
    source = list(stack.values())[-1][0]
    path = module_path(str(source))
    return path.split(".") if path else None


def common_module(nodes: Iterable[torch.fx.Node]) -> Optional[str]:
    """The innermost module enclosing every node whose module is known."""
    common: Optional[list[str]] = None
    for node in nodes:
        path = innermost_module(node)
        if path is None:
            continue
        if common is None:
            common = path
            continue
        shared = 0
        while shared < min(len(common), len(path)) and common[shared] == path[shared]:
            shared += 1
        common = common[:shared]
    return ".".join(common) if common else None


def user_keys(nodes: Iterable[torch.fx.Node]) -> Annotation:
    """``torch.fx.traceback.annotate`` keys of the nodes; differing values of one key
    are joined with `` + `` in node order."""
    values: dict[str, list[str]] = {}
    for node in nodes:
        for key, value in (node.meta.get("custom") or {}).items():
            key = str(key)
            if key in INDUCTOR_CUSTOM_KEYS:
                continue
            seen = values.setdefault(key, [])
            if str(value) not in seen:
                seen.append(str(value))
    return {key: " + ".join(seen) for key, seen in values.items()}


def annotation_of(
    nodes: Sequence[torch.fx.Node], fallback_name: str, is_backward: bool
) -> Annotation:
    """The bracket's dict: ``name``, ``module`` (when known), the user's keys and, in
    a backward graph, ``autograd_phase``. cgfast's own keys win over a user's."""
    annotation: Annotation = {
        "name": " + ".join(node.name for node in nodes) or fallback_name
    }
    module = common_module(nodes)
    if module:
        annotation["module"] = module
    for key, value in user_keys(nodes).items():
        annotation.setdefault(key, value)
    if is_backward:
        annotation["autograd_phase"] = "backward"
    return annotation


def computes(node: torch.fx.Node) -> bool:
    """Whether a node does work of its own: views and tuple indexing only rename."""
    if node.op != "call_function" or node.target is operator.getitem:
        return False
    return not getattr(node.target, "is_view", False)


def extern_origins(kernel: Any) -> list[torch.fx.Node]:
    """The FX nodes an extern kernel runs: its ``origin_node`` or, where that is
    unset (multi-output ops), its origins calling the kernel's op."""
    origin = getattr(kernel, "origin_node", None)
    if origin is not None:
        return [origin]
    op = getattr(kernel, "op_overload", None)
    return [n for n in kernel.origins if op is not None and n.target == op]


class GraphOrigins:
    """Facts about one lowered graph that attribute its kernels to FX nodes."""

    def __init__(self, graph: Any) -> None:
        from torch._inductor import ir

        removed = getattr(graph, "removed_operations", ())
        self.is_backward = bool(getattr(graph, "is_backward", False))
        self._fx_graph = getattr(graph, "graph", None)
        self._computed_by: dict[torch.fx.Node, set[str]] = {}
        for operation in graph.operations:
            name = operation.get_operation_name()
            if name in removed:
                continue
            if isinstance(operation, ir.ExternKernel):
                owned = extern_origins(operation)
            else:
                owned = [operation.origin_node] if operation.origin_node else []
            for origin in owned:
                self._computed_by.setdefault(origin, set()).add(name)
        self._order: dict[torch.fx.Graph, dict[torch.fx.Node, int]] = {}

    def _position(self, node: torch.fx.Node) -> int:
        order = self._order.get(node.graph)
        if order is None:
            order = {n: i for i, n in enumerate(node.graph.nodes)}
            self._order[node.graph] = order
        return order.get(node, len(order))

    def _label_nodes(self, nodes: Iterable[torch.fx.Node]) -> list[torch.fx.Node]:
        """The nodes in graph order; of those, the ones of this graph (a subgraph's
        origins include the enclosing graph's control-flow node) that do work, as far
        as any remain."""
        unique = sorted(
            {n: None for n in nodes if n.op == "call_function"}, key=self._position
        )
        local = [n for n in unique if n.graph is self._fx_graph] or unique
        return [n for n in local if computes(n)] or local

    def kernel(self, operations: Sequence[Any], kernel_name: str) -> Annotation:
        """Annotation of a generated kernel computing ``operations``."""
        mine = {op.get_operation_name() for op in operations}
        primary = [op.origin_node for op in operations if op.origin_node is not None]
        inlined = [
            origin
            for op in operations
            for origin in op.origins
            if not self._computed_by.get(origin, mine).isdisjoint(mine)
        ]
        nodes = self._label_nodes([*primary, *inlined]) or self._label_nodes(
            origin for op in operations for origin in op.origins
        )
        return annotation_of(nodes, kernel_name, self.is_backward)

    def extern(self, kernel: Any) -> Annotation:
        """Annotation of an extern or fallback kernel (an ``ir.ExternKernel``)."""
        nodes = self._label_nodes(extern_origins(kernel) or kernel.origins)
        name = getattr(kernel, "python_kernel_name", None) or kernel.get_name()
        return annotation_of(nodes, str(name), self.is_backward)


_by_graph: "weakref.WeakKeyDictionary[Any, GraphOrigins]" = weakref.WeakKeyDictionary()


def origins_of(graph: Any) -> GraphOrigins:
    """The ``GraphOrigins`` of a ``GraphLowering``, built once codegen needs it."""
    found = _by_graph.get(graph)
    if found is None:
        found = _by_graph[graph] = GraphOrigins(graph)
    return found
