"""Every change cgfast.capture makes to torch, made and undone in one place.

* ``install()`` wraps ``torch.cuda.CUDAGraph``'s ``capture_begin``, ``capture_end``,
  ``instantiate`` and ``replay`` (``patch_class`` does it to any graph class: they count
  the captures in progress and call ``_graphs`` where a capture begins, ends and is
  instantiated, stamp replays during a profiler session, and tell the runtime's
  ``replay_window`` of each replay), then replaces torch's
  ``graph_annotations`` functions (``_torch_api``); ``uninstall()`` undoes them in
  reverse.
* ``sync()`` wraps ``torch.nn.Module.__call__`` while an ``annotate_modules`` handle is
  active (``_module_calls.module_call``), and pushes the dispatch mode recording launch
  stacks (``_stacks``) while stacks are asked for and a capture is under way (on the
  thread that begins the capture), and the one recording op counts (``_op_counts``,
  pushed after it and taken out before it) while counts are asked for, taking each out
  again when that is no longer so. It runs after each change of the handles, the
  requests and the capture count.

Every applied :class:`Patch` is kept, in order, in ``runtime.installed``; a group of
them (a class's methods, torch's functions, ``Module.__call__``) is undone in reverse.
"""

from __future__ import annotations

import functools
from typing import Any, Hashable, List, Optional

from cgfast.capture import _graphs
from cgfast.capture._module_calls import module_call
from cgfast.capture._op_counts import op_counts_mode
from cgfast.capture._runtime import never_raises, runtime
from cgfast.capture._stacks import launch_stacks_mode
from cgfast.capture._torch_api import replacements

_COUNTED_ATTR = "_cgfast_counted"
_HOOKED_METHODS = ("capture_begin", "capture_end", "instantiate", "replay")
TORCH_ANNOTATIONS = "torch graph annotations"
MODULE_CALLS = "torch.nn.Module.__call__"
_INHERITED = object()  # the attribute was not in the owner's own __dict__
_UNREAD = object()


class Patch:
    """One attribute of torch replaced; ``group`` names what it belongs to."""

    __slots__ = ("group", "name", "only_if_ours", "original", "owner", "replacement")

    def __init__(
        self,
        group: Hashable,
        owner: Any,
        name: str,
        replacement: Any,
        *,
        original: Any = _UNREAD,
        only_if_ours: bool = False,
    ) -> None:
        self.group = group
        self.owner = owner
        self.name = name
        self.replacement = replacement
        self.original = original
        # restore only where nobody patched over it since (then what is there stays)
        self.only_if_ours = only_if_ours

    def apply(self) -> None:
        if self.original is _UNREAD:
            self.original = self.owner.__dict__.get(self.name, _INHERITED)
        setattr(self.owner, self.name, self.replacement)
        runtime.installed.append(self)

    def undo(self) -> None:
        runtime.installed.remove(self)
        if self.only_if_ours and self.owner.__dict__.get(self.name) is not self.replacement:
            return
        if self.original is _INHERITED:
            delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, self.original)


def _applied(group: Hashable) -> List[Patch]:
    return [patch for patch in runtime.installed if patch.group == group]


def _undo(group: Hashable) -> bool:
    """Undo ``group``'s patches, the last applied first; whether there were any."""
    patches = _applied(group)
    for patch in reversed(patches):
        patch.undo()
    return bool(patches)


# -- graph classes ----------------------------------------------------------------------


def patch_class(cls: type) -> bool:
    """Wrap ``cls``'s capture methods (idempotent). ``False`` when ``cls`` cannot capture."""
    if not _applied(cls):
        if not all(hasattr(cls, name) for name in ("capture_begin", "capture_end", "raw_cuda_graph_exec")):
            return False
        for name in _HOOKED_METHODS:
            if hasattr(cls, name):
                Patch(cls, cls, name, _wrapped(name, getattr(cls, name))).apply()
        runtime.class_patched()
    _graphs.notice_a_capture_begun_earlier()
    return True


def unpatch_class(cls: type) -> None:
    if _undo(cls):
        runtime.class_unpatched()


def _wrapped(name: str, original):
    if name == "capture_begin":

        def capture_begin(self, *args, **kwargs):
            if runtime.enabled and not runtime.backend_chosen:
                _choose_backend()  # before the capture: annotations went on without choosing
            original(self, *args, **kwargs)
            runtime.capture_began()
            _capture_changed()
            setattr(self, _COUNTED_ATTR, True)
            _graphs.on_capture_begin(self)

        wrapper = capture_begin
    elif name == "capture_end":

        def capture_end(self, *args, **kwargs):
            counted = getattr(self, _COUNTED_ATTR, False)
            setattr(self, _COUNTED_ATTR, False)
            if getattr(self, _graphs.KEYS_ATTR, None) is None:
                _graphs.take_over_capture(self)
            try:
                _graphs.on_capture_end(self)
                original(self, *args, **kwargs)
            except BaseException:
                _graphs.on_capture_failed(self)
                raise
            finally:
                runtime.capture_over(counted)
                _capture_changed()
            if getattr(self, _graphs.KEYS_ATTR, None) is not None and _graphs._has_exec(self):
                _graphs.on_instantiated(self)

        wrapper = capture_end
    elif name == "instantiate":

        def instantiate(self, *args, **kwargs):
            original(self, *args, **kwargs)
            _graphs.on_instantiated(self)

        wrapper = instantiate
    else:
        profiler = _profiler_flag()
        keys_attr = _graphs.KEYS_ATTR

        # no *args: packing them would cost more than the rest (torch's replay takes none)
        def replay(self):
            window = runtime.replay_window
            if window is not None:
                window.before_replay()
            if profiler._is_profiler_enabled:
                result = _graphs.stamped_replay(self, original)
            else:
                result = original(self)
                keys = getattr(self, keys_attr, None)
                if keys is not None and keys.key_id == keys.capture_id:
                    _graphs.on_instantiated(self)  # instantiated inside replay
            if window is not None:
                window.after_replay()
            return result

        wrapper = replay
    return functools.wraps(original)(wrapper)


def _profiler_flag() -> Any:
    """What says, in one attribute read, whether a profiler session is active:
    ``torch.autograd.profiler`` (its ``_is_profiler_enabled``, set by every profiler
    session since torch 2.1), else an object asking the profiler itself."""
    import torch.autograd.profiler as profiler

    if isinstance(getattr(profiler, "_is_profiler_enabled", None), bool):
        return profiler

    class _Asking:
        @property
        def _is_profiler_enabled(self) -> bool:
            import torch

            return bool(torch._C._autograd._profiler_enabled())

    return _Asking()


@never_raises("choosing the graph node id source at a capture's begin")
def _choose_backend() -> None:
    runtime.backend()


@never_raises("updating annotation hooks at a capture's begin or end")
def _capture_changed() -> None:
    sync()


# -- install / uninstall ---------------------------------------------------------------


def _torch_graph_class() -> Optional[type]:
    try:
        import torch
    except ImportError:
        return None
    return getattr(torch.cuda, "CUDAGraph", None)


def install() -> bool:
    """Patch ``torch.cuda.CUDAGraph`` so every capture made while annotations are enabled
    (``torch.cuda.graph``, ``make_graphed_callables``, Inductor's cudagraph trees, the
    graph wrappers of inference servers) is resolved at capture end and remapped after
    each instantiation. Idempotent; ``False`` when torch cannot capture CUDA graphs.

    While installed, the patched methods also count the captures in progress, and a
    scope opened while none is skips asking the driver whether its stream captures:
    scopes then record in captures made through ``torch.cuda.CUDAGraph`` (any of the
    above; one already under way on the current stream when recording starts is taken
    over), not in captures begun outside it (a raw ``cudaStreamBeginCapture``): for
    those, :func:`uninstall` and remap with :func:`remap_to_exec_graph`."""
    cls = _torch_graph_class()
    if cls is None or not patch_class(cls):
        return False
    if not _applied(TORCH_ANNOTATIONS):
        # torch's own mark_kernels, recorded where torch cannot
        for module, name, replacement in replacements():
            Patch(TORCH_ANNOTATIONS, module, name, replacement).apply()
    return True


def uninstall() -> None:
    """Undo :func:`install` (idempotent)."""
    _undo(TORCH_ANNOTATIONS)
    cls = _torch_graph_class()
    if cls is not None:
        unpatch_class(cls)


# -- what follows the runtime's state ----------------------------------------------------


def sync() -> None:
    """Put ``Module.__call__``'s wrapper and the launch-stack and op-count dispatch modes
    in, or take them out, as the runtime's handles, requests and captures ask."""
    _sync_module_calls()
    if not runtime.wants_count_mode():
        _sync_count_mode()  # pushed last: out first
    _sync_stack_mode()
    _sync_count_mode()


def _sync_module_calls() -> None:
    """Wrap module calls while a handle is active (replacing ``torch.nn.Module.__call__``
    modifies a type with hundreds of subclasses, measured at about 0.3 ms on the H200 host,
    so it is not done per capture); they do work only while a capture may be under way."""
    with runtime.modules_lock:
        wrapped = bool(_applied(MODULE_CALLS))
        # annotate_all_modules wraps them from the first capture on (programs that never
        # capture keep torch's own)
        naming = runtime.module_naming is not None
        capturing = runtime.captures_in_progress > runtime.compiled_captures or runtime.uncounted_capture
        if not wrapped and (runtime.modules or (naming and capturing)):
            _wrap_module_calls()
        elif wrapped and not runtime.modules and not naming:
            _undo(MODULE_CALLS)


def _wrap_module_calls() -> None:
    import torch
    from torch.nn.modules import module as nn_module

    runtime.autograd_calls = (torch.is_grad_enabled, torch._C._autograd._get_sequence_nr)
    runtime.global_module_hooks = (nn_module._global_forward_pre_hooks, nn_module._global_forward_hooks)
    runtime.quiet_module_types = (torch.nn.Identity, torch.nn.Dropout)
    current = torch.nn.Module.__dict__["__call__"]
    if current is module_call:
        # still in place from before (someone patched over it, then restored it)
        original = runtime.module_call_of_torch[0]
    else:
        runtime.module_call_of_torch = (current, torch.compiler.is_compiling)
        original = current
    # Restored only where nobody patched over it since (then it passes calls through
    # once no handle is active, see module_call).
    Patch(
        MODULE_CALLS, torch.nn.Module, "__call__", module_call, original=original, only_if_ours=True
    ).apply()


def _sync_stack_mode() -> None:
    """Push the launch-stack dispatch mode when a capture begins (stacks asked for), pop
    it when the last capture ends."""
    _sync_mode("stack_mode", runtime.wants_stack_mode(), launch_stacks_mode)


def _sync_count_mode() -> None:
    """Push the op-count dispatch mode when a capture begins (counts asked for), pop it
    when the last capture ends."""
    _sync_mode("count_mode", runtime.wants_count_mode(), op_counts_mode)


def _sync_mode(slot: str, want: bool, mode_class: Any) -> None:
    """Push a ``mode_class()`` kept in ``runtime.<slot>`` when ``want`` and none is
    pushed; pop it (if still on top) when not ``want``."""
    pushed = getattr(runtime, slot)
    if want and pushed is None:
        from torch.utils._python_dispatch import _push_mode

        mode = mode_class()()
        _push_mode(mode)
        setattr(runtime, slot, mode)
    elif pushed is not None and not want:
        from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode

        if _get_current_dispatch_mode() is pushed:
            _pop_mode()
        setattr(runtime, slot, None)
