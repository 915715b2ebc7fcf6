"""``annotate_modules``: every graph node a module's forward (and, through autograd, its
backward) creates during capture is annotated with the module's name.

Two global module hooks serve every handle. They are registered only while a capture
through ``torch.cuda.CUDAGraph`` is under way (any global module hook sends every module
call in the process down torch's slower path), and a module of no active handle costs
a dict lookup there. Module scopes are
*spans*: the capture graph's node count at forward entry and exit (local ids count a
graph's nodes in creation order), resolved against the graph's kernel, memcpy and memset
nodes once, at capture end, instead of walking the graph at every exit.

Backward: in a module's forward hook, the autograd nodes its forward created (reachable
from its outputs, with sequence numbers from its entry on, not claimed by an inner
module) get a prehook that makes the module's name, with ``"autograd_phase":
"backward"``, the owner of the nodes captured from then on (see ``_BackwardOwner``).
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple

from cgfast.capture import _stacks

from cgfast.capture._core import SpanStart
from cgfast.capture._state import state

# node.metadata keys: the backward annotation of the module / the user scopes that made
# the node, both merged (module keys winning), and whether its prehook is in place
_MODULE_KEY = "_cgfast_module_backward"
_SCOPE_KEY = "_cgfast_scope_backward"
_MERGED_KEY = "_cgfast_backward"
_BRACKETED = "_cgfast_bracketed"
BACKWARD_PHASE = {"autograd_phase": "backward"}

# module -> (its handle, forward annotation, backward annotation or None)
_registry: Dict[Any, Tuple["ModuleAnnotations", Dict[str, Any], Optional[Dict[str, Any]]]] = {}
_registry_lock = threading.RLock()
_hooks: List[Any] = []
_enabled_before = [False]  # whether annotations were on when the first active handle came
_frames = threading.local()  # .open: [(module, SpanStart, sequence number or None)]


def _open_frames() -> list:
    frames = getattr(_frames, "open", None)
    if frames is None:
        frames = _frames.open = []
    return frames


# stream -> (graph, graph id) of streams seen capturing into a recorded top-level graph
# since the last capture began or ended: later spans on them ask the driver only for
# the node count. Used only while every capture is counted (see _begin_span).
_stream_graphs: Dict[int, Tuple[int, int]] = {}


def _begin_span(backend) -> Optional[SpanStart]:
    """A span on the current stream's capture, or ``None`` when it does not capture."""
    streams = backend.streams
    recorder = state.recorder
    if state.uncounted_capture or not state.patched_classes:
        stream = streams.capturing_stream()
        return recorder.begin_span(backend, stream) if stream is not None else None
    stream = streams.current_stream()
    known = _stream_graphs.get(stream)
    if known is not None:
        return SpanStart(known[0], known[1], backend.graphs.node_count(known[0]))
    if streams.capturing_stream() is None:
        return None
    start = recorder.begin_span(backend, stream)
    if start is not None and recorder.is_capture_graph(start.graph):
        _stream_graphs[stream] = (start.graph, start.graph_id)
    return start


def _forward_pre_hook(module, args):
    if state.no_capture_in_progress():
        return None
    entry = _registry.get(module)
    if entry is None or not state.enabled:
        return None
    backend = state.backend()
    if backend is None:
        return None
    try:
        start = _begin_span(backend)
    except Exception:
        state.recorder.report_failure("reading the capture graph at a module's forward")
        return None
    if start is None:
        return None
    sequence = _torch_calls[1]() if entry[2] is not None and _torch_calls[0]() else None
    _open_frames().append((module, start, sequence))
    return None


def _forward_hook(module, args, output):
    frames = getattr(_frames, "open", None)
    if not frames:
        return None
    for depth in range(len(frames) - 1, -1, -1):
        if frames[depth][0] is module:
            break
    else:
        return None
    _, start, sequence = frames[depth]
    del frames[depth:]  # and any frame whose forward raised without its hook
    entry = _registry.get(module)
    backend = state.backend()
    if entry is None or backend is None:
        return None
    try:
        state.recorder.end_span(backend, start, entry[1])
    except Exception:
        state.recorder.report_failure("reading the capture graph at a module's forward end")
    if sequence is not None:
        _claim_backward(output, sequence, entry[2])
    return None


# -- backward ---------------------------------------------------------------------------


# torch.is_grad_enabled and the next autograd sequence number, bound when hooks go in
_torch_calls: list = []


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


def _claim_backward(output: Any, first_sequence_nr: int, annotation: Dict[str, Any]) -> None:
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

_scopes = threading.local()  # .open: merged backward annotations of open user scopes


def enter_backward_scope(annotation: Dict[str, Any]) -> bool:
    """While the scope is open, autograd nodes created on this thread get ``annotation``
    (merged over enclosing such scopes) for their backward. ``False`` where torch cannot
    report node creation (before 2.14): the scope then annotates forward work only."""
    import torch

    push = getattr(torch._C._autograd, "_push_node_creation_hook", None)
    if push is None:
        state.recorder.warn_once(
            "backward scopes",
            f"mark_kernels(..., backward=True) needs torch >= 2.14 (node creation hooks); "
            f"torch {torch.__version__} annotates the scope's forward work only",
        )
        return False
    open_scopes = getattr(_scopes, "open", None)
    if open_scopes is None:
        open_scopes = _scopes.open = []
    enclosing = open_scopes[-1] if open_scopes else {}
    open_scopes.append({**enclosing, **annotation, **BACKWARD_PHASE})
    if len(open_scopes) == 1:
        push(_on_node_created)
    return True


def exit_backward_scope() -> None:
    import torch

    open_scopes = _scopes.open
    open_scopes.pop()
    if not open_scopes:
        torch._C._autograd._pop_node_creation_hook()


def _on_node_created(node: Any) -> None:
    open_scopes = getattr(_scopes, "open", None)
    if not open_scopes or type(node).__name__ == "AccumulateGrad":
        return
    metadata = node.metadata
    metadata[_SCOPE_KEY] = open_scopes[-1]
    _bracket_backward(node, metadata)


class _BackwardOwner:
    """The annotation the backward nodes being created now belong to: set when a
    claimed autograd node starts (its prehook), so it also covers the gradient sums the
    engine adds after the node ran; ended by the next claimed node, an AccumulateGrad
    node, or the end of the backward pass. Autograd runs a device's nodes one at a time
    (one thread per device), so one owner serves."""

    def __init__(self) -> None:
        self.span = None  # (SpanStart, annotation)

    def start(self, annotation: Dict[str, Any]) -> None:
        first = self.span is None
        self.end()
        if state.no_capture_in_progress() or not state.enabled:
            return
        backend = state.backend()
        if backend is None:
            return
        try:
            start = _begin_span(backend)
        except Exception:
            state.recorder.report_failure("reading the capture graph at a backward node")
            return
        if start is None:
            return
        self.span = (start, annotation)
        if first:
            import torch

            torch.autograd.Variable._execution_engine.queue_callback(self.end)

    def end(self, *_: Any) -> None:
        span, self.span = self.span, None
        if span is not None:
            try:
                state.recorder.end_span(state.backend(), span[0], span[1])
            except Exception:
                state.recorder.report_failure("reading the capture graph after a backward node")


_owner = _BackwardOwner()


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
        _owner.start(annotation)
        return None

    node.register_prehook(prehook)
    for parent, _ in node.next_functions:
        if parent is not None and type(parent).__name__ == "AccumulateGrad" and _BRACKETED not in parent.metadata:
            parent.metadata[_BRACKETED] = True
            parent.register_prehook(_owner.end)


# -- handles ----------------------------------------------------------------------------


def _sync_hooks() -> None:
    """Hook modules only while a capture may be under way: with any global module hook,
    every module call in the process takes torch's slow path (about 3 us more)."""
    # A capture began or ended: forget what belonged to the previous one (its graph may
    # be gone), on this thread and in the backward owner.
    _stream_graphs.clear()
    state.recorder.forget_graph_ids()
    _open_frames().clear()
    _owner.span = None
    with _registry_lock:
        wanted = bool(_registry) and (
            state.captures_in_progress > 0 or state.uncounted_capture or state.patched_classes == 0
        )
        if wanted and not _hooks:
            _install_hooks()
        elif _hooks and not wanted:
            while _hooks:
                _hooks.pop().remove()


def _install_hooks() -> None:
    import inspect

    import torch
    from torch.nn.modules import module as nn_module

    _torch_calls[:] = [torch.is_grad_enabled, torch._C._autograd._get_sequence_nr]

    _hooks.append(nn_module.register_module_forward_pre_hook(_forward_pre_hook))
    extra = {}
    if "always_call" in inspect.signature(nn_module.register_module_forward_hook).parameters:
        extra["always_call"] = True  # keeps the open frames balanced when a forward raises
    _hooks.append(nn_module.register_module_forward_hook(_forward_hook, **extra))


class ModuleAnnotations:
    """What :func:`annotate_modules` returns: ``remove()`` (or leaving its ``with``
    block) stops annotating; removing twice is harmless."""

    def __init__(
        self,
        model: Any,
        *,
        prefix: Optional[str],
        key: str,
        backward: bool,
        stacks: bool = False,
        stack_filter_paths: Optional[Sequence[str]] = None,
    ) -> None:
        try:
            import torch
        except ImportError as exc:  # pragma: no cover - torch is what gives modules
            raise TypeError("annotate_modules needs torch") from exc
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"annotate_modules takes a torch.nn.Module, not {type(model).__name__}")
        if not isinstance(key, str) or not key:
            raise TypeError("annotate_modules: key must be a non-empty str")
        if prefix is not None and not isinstance(prefix, str):
            raise TypeError(f"annotate_modules: prefix must be a str or None, not {type(prefix).__name__}")
        self.model = model
        self.key = key
        entries = {}
        for name, module in model.named_modules():
            if prefix:
                name = f"{prefix}.{name}" if name else prefix
            forward = {key: name}
            entries[module] = (self, forward, {**forward, **BACKWARD_PHASE} if backward else None)
        with _registry_lock:
            for module in entries:
                owner = _registry.get(module)
                if owner is not None:
                    name = owner[1][owner[0].key]
                    raise ValueError(
                        f"annotate_modules: module {name!r} ({type(module).__name__}) is already "
                        "annotated by another active handle; remove() that one first"
                    )
            if not _registry:
                _enabled_before[0] = state.enabled
            _registry.update(entries)
            self._modules = list(entries)
        from cgfast.capture._scopes import enable_annotations

        enable_annotations()
        self._stacks = stacks
        if stacks:
            _stacks.request(self, stack_filter_paths)
        if _sync_hooks not in state.capture_listeners:
            state.capture_listeners.append(_sync_hooks)
        _sync_hooks()

    @property
    def active(self) -> bool:
        return bool(self._modules)

    def remove(self) -> None:
        with _registry_lock:
            if not self._modules:
                return
            for module in self._modules:
                if _registry.get(module, (None,))[0] is self:
                    del _registry[module]
            self._modules = []
            last = not _registry
        if self._stacks:
            _stacks.release(self)
        _sync_hooks()
        if last and not _enabled_before[0]:
            state.enabled = False

    def __enter__(self) -> "ModuleAnnotations":
        return self

    def __exit__(self, exc_type, exc, traceback) -> bool:
        self.remove()
        return False


def annotate_modules(
    model: Any,
    *,
    prefix: Optional[str] = None,
    key: str = "module",
    backward: bool = True,
    stacks: bool = False,
    stack_filter_paths: Optional[Sequence[str]] = None,
) -> ModuleAnnotations:
    """Annotate every graph node captured inside a forward of ``model`` or one of its
    submodules with ``{key: <name>}`` of the innermost one, named as
    ``model.named_modules()`` names it (``prefix.`` before it; the root is ``prefix``
    or ``""``). With ``backward``, nodes its backward creates during a captured
    backward get that annotation plus ``"autograd_phase": "backward"``.

    Uses global module hooks, so ``torch.cuda.make_graphed_callables`` accepts the
    model. Enables annotations (like :func:`enable_annotations`) while active; the
    handle's ``remove()`` turns them off again if they were off before. Composes with
    ``mark_kernels`` scopes: the innermost scope wins on common keys.

    With ``stacks``, every node also gets the user Python frames that launched it
    (see :func:`get_kernel_stacks`), filtered like torch 2.15 filters them or by the
    directories in ``stack_filter_paths``."""
    return ModuleAnnotations(
        model, prefix=prefix, key=key, backward=backward, stacks=stacks, stack_filter_paths=stack_filter_paths
    )
