"""Backward annotations: which annotation the kernels a captured backward creates get.

An autograd node claimed by a module (``claim_backward``, from the module's forward
hook: the nodes its forward made) or made inside a ``mark_kernels(..., backward=True)``
scope (a node creation hook) gets a prehook: when it runs, its annotation plus
``"autograd_phase": "backward"`` becomes the owner of the nodes captured from then on
(a span), until the next such node starts, an AccumulateGrad node starts, or the
backward pass ends (see ``start_backward_span``).
"""

from __future__ import annotations

from typing import Any, Dict

from cgfast.capture._runtime import never_raises, runtime
from cgfast.capture._spans import begin_span

# node.metadata keys: the backward annotation of the module / the user scopes that made
# the node, both merged (module keys winning), and whether its prehook is in place
_MODULE_KEY = "_cgfast_module_backward"
_SCOPE_KEY = "_cgfast_scope_backward"
_MERGED_KEY = "_cgfast_backward"
_BRACKETED = "_cgfast_bracketed"
BACKWARD_PHASE = {"autograd_phase": "backward"}


def _grad_fns(output: Any) -> list:
    found = []
    stack = [output]
    while stack:
        item = stack.pop()
        grad_fn = getattr(item, "grad_fn", None)
        if grad_fn is not None:
            found.append(grad_fn)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return found


def claim_backward(output: Any, first_sequence_nr: int, annotation: Dict[str, Any]) -> None:
    """Give the autograd nodes created since ``first_sequence_nr`` that lead to
    ``output`` and that no inner module claimed this module's backward annotation.
    AccumulateGrad nodes (cached per leaf, owned by no forward) are left alone, as
    torch does."""
    import torch

    accumulate = torch._C._functions.AccumulateGrad
    stack = _grad_fns(output)
    seen = set()
    while stack:
        node = stack.pop()
        if node in seen or isinstance(node, accumulate):
            continue
        seen.add(node)
        if node._sequence_nr() < first_sequence_nr:
            continue  # made before this module's forward began
        metadata = node.metadata
        if _MODULE_KEY not in metadata:
            metadata[_MODULE_KEY] = annotation
            _bracket_backward(node, metadata)
        stack.extend(parent for parent, _ in node.next_functions if parent is not None)


# -- mark_kernels(..., backward=True) ---------------------------------------------------


def enter_backward_scope(annotation: Dict[str, Any]) -> bool:
    """While the scope is open, autograd nodes created on this thread get ``annotation``
    (merged over enclosing such scopes) for their backward. ``False`` where torch cannot
    report node creation (before 2.14): the scope then annotates forward work only."""
    import torch

    push = getattr(torch._C._autograd, "_push_node_creation_hook", None)
    if push is None:
        runtime.recorder.warn_once(
            "backward scopes",
            f"mark_kernels(..., backward=True) needs torch >= 2.14 (node creation hooks); "
            f"torch {torch.__version__} annotates the scope's forward work only",
        )
        return False
    scopes = runtime.backward_scopes
    open_scopes = getattr(scopes, "open", None)
    if open_scopes is None:
        open_scopes = scopes.open = []
    enclosing = open_scopes[-1] if open_scopes else {}
    open_scopes.append({**enclosing, **annotation, **BACKWARD_PHASE})
    if len(open_scopes) == 1:
        push(_on_node_created)
    return True


def exit_backward_scope() -> None:
    import torch

    open_scopes = runtime.backward_scopes.open
    open_scopes.pop()
    if not open_scopes:
        torch._C._autograd._pop_node_creation_hook()


def _on_node_created(node: Any) -> None:
    open_scopes = getattr(runtime.backward_scopes, "open", None)
    if not open_scopes or type(node).__name__ == "AccumulateGrad":
        return
    metadata = node.metadata
    metadata[_SCOPE_KEY] = open_scopes[-1]
    _bracket_backward(node, metadata)


# -- the backward span ------------------------------------------------------------------
# The annotation the backward nodes being created now belong to (runtime.backward_span):
# set when a claimed autograd node starts (its prehook), so it also covers the gradient
# sums the engine adds after the node ran; ended by the next claimed node, an
# AccumulateGrad node, or the end of the backward pass. Autograd runs a device's nodes
# one at a time (one thread per device), so one span serves.


def start_backward_span(annotation: Dict[str, Any]) -> None:
    first = runtime.backward_span is None
    end_backward_span()
    if runtime.no_capture_in_progress() or not runtime.enabled:
        return
    backend = runtime.backend()
    if backend is None:
        return
    start = _begin_span(backend)
    if start is None:
        return
    runtime.backward_span = (backend, start, annotation)
    if first:
        import torch

        torch.autograd.Variable._execution_engine.queue_callback(end_backward_span)


def end_backward_span(*_: Any) -> None:
    span, runtime.backward_span = runtime.backward_span, None
    if span is not None:
        _end_span(*span)


_begin_span = never_raises("reading the capture graph at a backward node")(begin_span)


@never_raises("reading the capture graph after a backward node")
def _end_span(backend: Any, start: Any, annotation: Dict[str, Any]) -> None:
    runtime.recorder.end_span(backend, start, annotation)


def _bracket_backward(node: Any, metadata: Dict[Any, Any]) -> None:
    """Once per node: a prehook that makes its backward annotation (its module's, over
    the user scopes' it was created in) the owner of what is captured next."""
    if _BRACKETED in metadata:
        return
    metadata[_BRACKETED] = True

    def prehook(grad_outputs):
        annotation = metadata.get(_MERGED_KEY)
        if annotation is None:
            scope, module = metadata.get(_SCOPE_KEY), metadata.get(_MODULE_KEY)
            annotation = metadata[_MERGED_KEY] = {**scope, **module} if scope and module else scope or module
        start_backward_span(annotation)
        return None

    node.register_prehook(prehook)
    for parent, _ in node.next_functions:
        if (
            parent is not None
            and type(parent).__name__ == "AccumulateGrad"
            and _BRACKETED not in parent.metadata
        ):
            parent.metadata[_BRACKETED] = True
            parent.register_prehook(end_backward_span)
