"""What a kernel launch is annotated with, from the FX nodes it was generated from.

IR origins are noisy: a buffer's ``origins`` also hold the producers inlined into it
and, when a consumer forced its realisation, that consumer. So a kernel takes the
``origin_node`` of each buffer it computes plus those inlined origins that no other
kernel computes; an extern kernel takes its ``origin_node`` (or the origins calling
its op) alone. Its module is narrower: that of the nodes whose values the buffers it
writes hold (``ModuleNames`` turns Dynamo's module stacks into names of the compiled
root's ``named_modules()``); every other module its nodes touch goes to ``modules``.
"""

from __future__ import annotations

import functools
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

_SOURCE_ROOT = re.compile(r"[LG]\[(['\"])((?:(?!\1).)*)\1\]")
_SOURCE_STEP = re.compile(r"\.(\w+)|\[(-?\d+)\]|\[(['\"])((?:(?!\3).)*)\3\]")
# Dynamo may spell `self.layers[0]` as `self._modules['layers']._modules['0']`.
_CONTAINER_ATTRS = frozenset({"_modules", "_parameters", "_buffers", "__dict__"})
# Steps right after the root reference that reach a module without naming a child of
# it: a closure cell, the module inside an `OptimizedModule`; so does an item right
# after the reference (`L['args'][0]`: how a decorated `forward(*args)` reaches self).
_WRAPPER_ATTR = "_orig_mod"
_REACHING_ATTRS = frozenset({"__closure__", "cell_contents", _WRAPPER_ATTR, "__self__"})
# Dynamo's alias of an imported Python module: what hangs off it is a function or a
# module-like wrapper of one (transformers wraps `apply_rotary_pos_emb` so), never a
# submodule of the compiled model.
_IMPORT_ALIAS = re.compile(r"G\[(['\"])__import_")

ModulePath = tuple[str, ...]


@functools.lru_cache(maxsize=4096)
def split_source(source: str) -> tuple[str, ModulePath]:
    """A module's ``nn_module_stack`` source name split into the reference reaching
    the module its path starts from and the child names below it:
    ``L['args'][0].layers[0].proj`` -> ``("L['args'][0]", ("layers", "0", "proj"))``.
    torch.export's spelling (a dotted path from the root) has an empty reference."""
    root = _SOURCE_ROOT.match(source)
    if root is None:
        return "", tuple(part for part in source.split(".") if part)
    position = base_end = root.end()
    steps: list[str] = []
    reaching = True
    while position < len(source):
        step = _SOURCE_STEP.match(source, position)
        if step is None:  # an unfamiliar spelling: keep it readable rather than drop it
            steps.append(source[position:].lstrip("."))
            break
        name = next(g for g in (step.group(1), step.group(2), step.group(4)) if g is not None)
        is_item = step.group(1) is None
        if reaching and (name in _REACHING_ATTRS or is_item):
            base_end = step.end()
        else:
            reaching = False
            if name not in _CONTAINER_ATTRS:
                steps.append(name)
        position = step.end()
    return source[:base_end], tuple(steps)


def module_path(source: str) -> str:
    """The dotted child path of a module below the reference reaching its root:
    ``L['self'].layers[0].proj`` -> ``layers.0.proj``; the root module is ``""``."""
    return ".".join(split_source(source)[1])


def _reference_name(base: str) -> ModulePath:
    """A readable name of a root reference: ``L['args'][0]`` -> ``("args", "0")``."""
    root = _SOURCE_ROOT.match(base)
    if root is None:
        return ()
    names = [root.group(2)]
    for step in _SOURCE_STEP.finditer(base, root.end()):
        name = next(g for g in (step.group(1), step.group(2), step.group(4)) if g is not None)
        if name not in _REACHING_ATTRS:
            names.append(name)
    return tuple(names)


def _stack(node: torch.fx.Node) -> list[tuple[str, ModulePath]]:
    """The node's module stack, outermost first, as (reference, child path) pairs;
    backward nodes carry their forward node's stack as ``fwd_nn_module_stack``."""
    stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack")
    if not stack:
        return []
    return [split_source(str(entry[0])) for entry in stack.values()]


class ModuleNames:
    """Names of the modules of one graph's nodes, relative to the module compiled.

    Dynamo spells each module of a stack from a reference in the compiled frame
    (``L['self']``, ``L['args'][0]``, ``G['model']``, a closure cell). The compiled
    root is the reference the outermost modules hang off: a local one where any
    exists, never an imported Python module. A node's module is the innermost entry
    of its stack reached from that root; entries reached otherwise (a global helper
    module, a wrapped function) are no submodule of it and are passed over. Where a
    function reaches several modules, each name starts with its reference's name.
    """

    def __init__(self, nodes: Iterable[torch.fx.Node]) -> None:
        self._nodes = list(nodes)
        outermost: dict[str, None] = {}
        for node in self._nodes:
            stack = _stack(node)
            if stack and not _IMPORT_ALIAS.match(stack[0][0]):
                outermost.setdefault(stack[0][0], None)
        local = [base for base in outermost if base.startswith("L[")]
        roots = local or list(outermost)
        if len(roots) == 1:
            self._prefix: dict[str, ModulePath] = {roots[0]: ()}
        else:
            self._prefix = {base: _reference_name(base) for base in roots}
        # Submodules compiled on their own are `OptimizedModule`s: Dynamo spells
        # their module `block` in some entries and `block._orig_mod` in others,
        # and only the latter (with what is below it) is in named_modules().
        self._wrapped: set[ModulePath] = set()
        for node in self._nodes:
            for path in filter(None, map(self._raw_path, _stack(node))):
                self._wrapped.update(path[:i] for i, part in enumerate(path) if part == _WRAPPER_ATTR and i)

    def _raw_path(self, entry: tuple[str, ModulePath]) -> Optional[ModulePath]:
        prefix = self._prefix.get(entry[0])
        return None if prefix is None else prefix + entry[1]

    def of(self, node: torch.fx.Node) -> Optional[ModulePath]:
        """The path of the innermost module of the root enclosing ``node`` (``()``
        for the root itself), or None when it has none."""
        for entry in reversed(_stack(node)):
            path = self._raw_path(entry)
            if path is not None:
                return self._unwrapped(path)
        return None

    def _unwrapped(self, path: ModulePath) -> ModulePath:
        if not self._wrapped:
            return path
        parts: list[str] = []
        for i, part in enumerate(path):
            parts.append(part)
            if tuple(parts) in self._wrapped and path[i + 1 : i + 2] != (_WRAPPER_ATTR,):
                parts.append(_WRAPPER_ATTR)
        return tuple(parts)


def common_ancestor(paths: Iterable[ModulePath]) -> Optional[ModulePath]:
    """The innermost module enclosing every path; None when there is none."""
    common: Optional[ModulePath] = None
    for path in paths:
        if common is None:
            common = path
            continue
        shared = 0
        while shared < min(len(common), len(path)) and common[shared] == path[shared]:
            shared += 1
        common = common[:shared]
    return common


def common_module(nodes: Iterable[torch.fx.Node], names: Optional[ModuleNames] = None) -> Optional[str]:
    """The innermost module enclosing every node whose module is known; names are
    relative to the root ``names`` found (by default, the nodes' own)."""
    nodes = list(nodes)
    names = names or ModuleNames(nodes)
    paths = [p for p in (names.of(n) for n in nodes) if p is not None]
    common = common_ancestor(paths)
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
    nodes: Sequence[torch.fx.Node],
    fallback_name: str,
    is_backward: bool,
    written: Optional[Sequence[torch.fx.Node]] = None,
    names: Optional[ModuleNames] = None,
) -> Annotation:
    """The bracket's dict: ``name``, ``module`` (when known: the innermost module
    enclosing the ``written`` nodes, by default all of them), ``modules`` (where the
    nodes touch more modules than ``module``: each, in node order), the user's keys
    and, in a backward graph, ``autograd_phase``. cgfast's own keys win over a user's."""
    annotation: Annotation = {"name": " + ".join(node.name for node in nodes) or fallback_name}
    names = names or ModuleNames(nodes)
    module = common_module(nodes if written is None else written, names)
    if module:
        annotation["module"] = module
    touched = list({".".join(p): None for p in (names.of(n) for n in nodes) if p})
    if touched and touched != [module]:
        annotation["modules"] = " + ".join(touched)
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
        self._scheduler = getattr(graph, "scheduler", None)
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
        self._names = ModuleNames(self._fx_graph.nodes) if self._fx_graph else None

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
        unique = sorted({n: None for n in nodes if n.op == "call_function"}, key=self._position)
        local = [n for n in unique if n.graph is self._fx_graph] or unique
        return [n for n in local if computes(n)] or local

    def _is_stored(self, operation: Any, mine: set[int]) -> bool:
        """Whether a kernel computing the operations ``mine`` (by id) writes the
        buffer of ``operation``: something outside the kernel, or the graph's
        output, reads it. Buffers only the kernel itself reads stay in registers."""
        found = getattr(self._scheduler, "name_to_buf", {}).get(operation.get_name())
        users = getattr(found, "users", None)
        if not users:
            return True
        return any(id(getattr(user.node, "node", None)) not in mine for user in users)

    def _producer(self, operation: Any) -> Optional[torch.fx.Node]:
        """The FX node whose value a buffer holds: its ``origin_node`` or, where
        unset, its last origin in graph order that does work."""
        if operation.origin_node is not None:
            return operation.origin_node
        candidates = self._label_nodes(operation.origins)
        return candidates[-1] if candidates else None

    def kernel(self, operations: Sequence[Any], kernel_name: str) -> Annotation:
        """Annotation of a generated kernel computing ``operations``: named for
        every node it computes, attributed to the modules of the buffers it writes
        (inlined or recomputed producers do not widen its module)."""
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
        ids = {id(op) for op in operations}
        producers = [self._producer(op) for op in operations if self._is_stored(op, ids)]
        written = self._label_nodes(p for p in producers if p is not None) or None
        return annotation_of(nodes, kernel_name, self.is_backward, written, self._names)

    def extern(self, kernel: Any) -> Annotation:
        """Annotation of an extern or fallback kernel (an ``ir.ExternKernel``)."""
        nodes = self._label_nodes(extern_origins(kernel) or kernel.origins)
        name = getattr(kernel, "python_kernel_name", None) or kernel.get_name()
        return annotation_of(nodes, str(name), self.is_backward, None, self._names)


_by_graph: weakref.WeakKeyDictionary[Any, GraphOrigins] = weakref.WeakKeyDictionary()


def origins_of(graph: Any) -> GraphOrigins:
    """The ``GraphOrigins`` of a ``GraphLowering``, built once codegen needs it."""
    found = _by_graph.get(graph)
    if found is None:
        found = _by_graph[graph] = GraphOrigins(graph)
    return found
