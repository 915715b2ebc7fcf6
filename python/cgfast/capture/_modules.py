"""``annotate_modules``: every graph node a module's forward (and, through autograd, its
backward) creates during capture is annotated with the module's name.

One wrapper of ``torch.nn.Module.__call__`` serves every handle, doing what a pair of
global forward hooks would without sending every module call down torch's slower path.
It is in place while a handle is active; outside captures through ``torch.cuda.CUDAGraph``
it checks a flag, and during them a module of no active handle costs a dict lookup.
Module scopes are spans (``_spans``); the backward of what a module's forward made is
claimed for it in its forward hook (``_backward``).
"""

from __future__ import annotations

import threading
from typing import Any, Dict, List, Literal, Optional, Sequence, Tuple

from cgfast.capture import _stacks
from cgfast.capture._backward import BACKWARD_PHASE, claim_backward
from cgfast.capture._spans import begin_span, stream_graphs
from cgfast.capture._state import state

# module -> (its handle, forward annotation, backward annotation or None, whether it is
# an exact nn.Identity or nn.Dropout, whose calls may launch nothing: see _launches_nothing)
_registry: Dict[Any, Tuple[ModuleAnnotations, Dict[str, Any], Optional[Dict[str, Any]], bool]] = {}
_registry_lock = threading.RLock()
_hooks: List[Any] = []
_enabled_before = [False]  # whether annotations were on when the first active handle came
# .open: the frames of the annotated module calls under way on this thread, innermost
# last: [module, graph, graph id, first local id of its open segment, its closed
# segments as [(first, end)] or None]
_frames = threading.local()


def _open_frames() -> list:
    frames = getattr(_frames, "open", None)
    if frames is None:
        frames = _frames.open = []
    return frames


# A module's nodes are recorded as segments that leave out its children's: from its
# entry (or a child's exit) to a child's entry (or its own exit). Every node is then in
# one module span, the innermost, so resolving costs one entry per node however deep the
# module tree is, and the node counts read at each boundary serve both sides of it.
# A module's segments are recorded when it exits, after what exited inside it (its
# children, user scopes), so that those still win on common keys.


def _position(backend) -> Optional[Tuple[int, int, int]]:
    """``(graph, graph id, node count)`` of the current stream's capture, or ``None``."""
    try:
        if not state.uncounted_capture and state.patched_classes:
            known = stream_graphs.get(backend.streams.current_stream())
            if known is not None:
                return known[0], known[1], backend.graphs.node_count(known[0])
        start = begin_span(backend)
    except Exception:  # annotation must never break the capture
        state.recorder.report_failure("reading the capture graph at a module's forward")
        return None
    return None if start is None else (start.graph, start.graph_id, start.first)


def _module_call(self, *args, **kwargs):
    """``torch.nn.Module.__call__`` while a handle is active: outside captures a flag check;
    during them what a pair of global forward hooks would do around torch's own call,
    without the slow call path any global module hook sends every module call down
    (about 3 us a call). One function, as every call during a capture comes through it."""
    call, is_compiling = _module_call_of_torch
    # torch.compile traces module calls through this: checked first, so its graphs take
    # the plain path and keep no guard on the capture flag (which would recompile them
    # inside every capture, then trace the driver queries)
    if is_compiling() or not _capturing[0]:
        return call(self, *args, **kwargs)
    entry = _registry.get(self)
    if entry is None or not state.enabled or (entry[3] and _launches_nothing(self)):
        return call(self, *args, **kwargs)
    backend = state.backend()
    position = _position(backend) if backend is not None else None
    if position is None:
        return call(self, *args, **kwargs)
    graph, graph_id, first = position
    frames = getattr(_frames, "open", None)
    if frames is None:
        frames = _frames.open = []
    elif frames:
        parent = frames[-1]
        if parent[1] == graph:
            if first > parent[3]:
                if parent[4] is None:
                    parent[4] = [(parent[3], first)]
                else:
                    parent[4].append((parent[3], first))
            parent[3] = first
    backward = entry[2]  # type: ignore[index]
    sequence = _torch_calls[1]() if backward is not None and _torch_calls[0]() else None
    frame = [self, graph, graph_id, first, None]
    frames.append(frame)
    output = None
    try:
        output = call(self, *args, **kwargs)
    finally:  # also when the forward raises, as torch's always_call hooks
        _module_exit(frames, frame, backend, output, entry[1], sequence, backward)  # type: ignore[index]
    return output


def _launches_nothing(module) -> bool:
    """Whether this call of an exact ``nn.Identity`` or ``nn.Dropout`` certainly adds no
    node, so that it needs no node counts around it (a timm ViT-S has 150 of them among
    276 modules): no hook of its own or global one runs (a hook may launch work), and a
    ``Dropout`` is in eval mode or has ``p == 0`` (``at::dropout`` then returns its input)."""
    if module._forward_pre_hooks or module._forward_hooks or _global_hooks[0] or _global_hooks[1]:
        return False
    return type(module) is not _quiet_types[1] or not module.training or module.p == 0


def _module_exit(frames, frame, backend, output, annotation, sequence, backward) -> None:
    depth = len(frames) - 1
    while depth >= 0 and frames[depth] is not frame:
        depth -= 1
    if depth < 0:
        return  # a capture began or ended inside the forward: its graph may be gone
    del frames[depth:]  # and any frame whose forward raised unseen
    _, graph, graph_id, first, segments = frame
    recorder = state.recorder
    try:
        end = backend.graphs.node_count(graph)
    except Exception:  # annotation must never break the capture
        recorder.report_failure("reading the capture graph at a module's forward end")
    else:
        recorder.add_segments(graph_id, first, end, segments, annotation)
        if frames and frames[-1][1] == graph:
            frames[-1][3] = end
    if sequence is not None:
        claim_backward(output, sequence, backward)


# torch.is_grad_enabled and the next autograd sequence number, torch's global forward
# (pre-)hooks, and (nn.Identity, nn.Dropout): bound when hooks go in
_torch_calls: list = []
_global_hooks: list = [{}, {}]
_quiet_types: list = []


# -- handles ----------------------------------------------------------------------------


def _sync_hooks() -> None:
    """Wrap module calls while a handle is active (replacing ``torch.nn.Module.__call__``
    modifies a type with hundreds of subclasses, measured at about 0.3 ms on the H200 host,
    so it is not done per capture); they do work only while a capture may be under way."""
    _open_frames().clear()  # a capture began or ended: their graph may be gone
    with _registry_lock:
        _capturing[0] = bool(_registry) and (
            state.captures_in_progress > 0 or state.uncounted_capture or state.patched_classes == 0
        )
        if _registry and not _hooks:
            _install_hooks()
        elif _hooks and not _registry:
            while _hooks:
                _hooks.pop().remove()


# whether a capture may be under way (and a handle is active): module calls do work
_capturing = [False]
# torch.nn.Module.__call__ as it was before _install_hooks replaced it, and
# torch.compiler.is_compiling
_module_call_of_torch: list = []


class _ModuleCallPatch:
    """``torch.nn.Module.__call__`` replaced by :func:`_module_call` until ``remove()``."""

    def __init__(self, module_class: Any) -> None:
        self._class = module_class
        current = module_class.__dict__["__call__"]
        if current is not _module_call:
            import torch

            _module_call_of_torch[:] = [current, torch.compiler.is_compiling]
            module_class.__call__ = _module_call

    def remove(self) -> None:
        # Restored only where nobody patched over it since (then it passes calls through
        # once no handle is active, see _module_call).
        if self._class.__dict__.get("__call__") is _module_call:
            self._class.__call__ = _module_call_of_torch[0]


def _install_hooks() -> None:
    import torch
    from torch.nn.modules import module as nn_module

    _torch_calls[:] = [torch.is_grad_enabled, torch._C._autograd._get_sequence_nr]
    _global_hooks[:] = [nn_module._global_forward_pre_hooks, nn_module._global_forward_hooks]
    _hooks.append(_ModuleCallPatch(torch.nn.Module))


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
        _quiet_types[:] = [torch.nn.Identity, torch.nn.Dropout]
        for name, module in model.named_modules():
            if prefix:
                name = f"{prefix}.{name}" if name else prefix
            forward = {key: name}
            quiet = type(module) in _quiet_types
            entries[module] = (self, forward, {**forward, **BACKWARD_PHASE} if backward else None, quiet)
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

    def __enter__(self) -> ModuleAnnotations:
        return self

    def __exit__(self, exc_type, exc, traceback) -> Literal[False]:
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

    Wraps ``torch.nn.Module.__call__`` while active (no hook on any module, and no
    global hook sending every module call down torch's slower path), so
    ``torch.cuda.make_graphed_callables`` accepts the model; outside captures a module
    call costs a flag check more. Enables annotations (like :func:`enable_annotations`)
    while active; the handle's ``remove()`` turns them off again if they were off
    before. Composes with ``mark_kernels`` scopes: the innermost scope wins on common
    keys.

    With ``stacks``, every node also gets the user Python frames that launched it
    (see :func:`get_kernel_stacks`), filtered like torch 2.15 filters them or by the
    directories in ``stack_filter_paths``."""
    return ModuleAnnotations(
        model, prefix=prefix, key=key, backward=backward, stacks=stacks, stack_filter_paths=stack_filter_paths
    )
