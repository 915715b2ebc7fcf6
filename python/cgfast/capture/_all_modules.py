"""``annotate_all_modules``: every ``nn.Module`` that runs during a capture is named by its
path from the outermost module called (the model), with no handle on the model.

The handle is the runtime's ``module_naming``. The first time a module no handle
registered is called during a capture, the module-call wrapper asks it for an entry:
it finds the outermost module call under way on the thread (torch's ``Module.__call__``
frames, also those begun before the capture or before the wrapper was put in), and
registers that model's modules as ``annotate_modules(model)`` would, so what is
recorded is the same. A module outside the tree of the model calling it is left
unregistered, as ``annotate_modules`` leaves it. Handles of ``annotate_modules`` take precedence: they replace these entries.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Dict, List, Literal, Optional, Sequence

from cgfast.capture import _patches, _stacks
from cgfast.capture._backward import BACKWARD_PHASE
from cgfast.capture._runtime import ModuleEntry, never_raises, runtime


class AllModuleAnnotations:
    """What :func:`annotate_all_modules` returns: ``remove()`` (or leaving its ``with``
    block) stops naming modules; removing twice is harmless."""

    # entries of this handle give way to an annotate_modules handle's (see add_modules)
    yields_to_handles = True

    def __init__(
        self,
        *,
        key: str,
        backward: bool,
        stacks: bool,
        stack_filter_paths: Optional[Sequence[str]],
    ) -> None:
        if not isinstance(key, str) or not key:
            raise TypeError("annotate_all_modules: key must be a non-empty str")
        paths = _stacks.filter_paths(stack_filter_paths) if stacks else None
        self.key = key
        self._backward = backward
        self._stacks = stacks
        import torch

        self._module_type = torch.nn.Module
        self._quiet_types = (torch.nn.Identity, torch.nn.Dropout)
        self._call_codes: Optional[frozenset] = None
        self._foreign: weakref.WeakSet = weakref.WeakSet()
        self._active = True
        # patched before annotations go on, so that no id source is chosen until a capture
        _patches.install()
        runtime.set_module_naming(self)
        self._hold: Optional[int] = runtime.hold()
        if stacks:
            runtime.request_stacks(self, paths)
        _patches.sync()

    @property
    def active(self) -> bool:
        return self._active

    def remove(self) -> None:
        if not self._active:
            return
        self._active = False
        runtime.set_module_naming(None)
        with runtime.modules_lock:
            mine = [module for module, entry in runtime.modules.items() if entry[0] is self]
            runtime.remove_modules(self, mine)
        if self._stacks:
            runtime.release_stacks(self)
        _patches.sync()
        if self._hold is not None:
            runtime.release(self._hold)
            self._hold = None

    def __enter__(self) -> AllModuleAnnotations:
        return self

    def __exit__(self, exc_type, exc, traceback) -> Literal[False]:
        self.remove()
        return False

    @never_raises("naming a module called during a capture")
    def entry_for(self, module: Any) -> Optional[ModuleEntry]:
        """The entry of ``module``, called during a capture and registered by no handle:
        its model's modules are registered first (``None`` once this handle is removed)."""
        with runtime.modules_lock:
            if not self._active:
                return None
            entry = runtime.modules.get(module)
            if entry is not None:
                return entry
            if module in self._foreign:
                return None
            entries = self._entries(self._outermost_call(module))
            if module not in entries:
                # called by a model it is no part of (transformers' kernel-hub functions
                # are modules): its nodes are the calling module's, as annotate_modules has it
                self._foreign.add(module)
                return None
            new = {m: e for m, e in entries.items() if m not in runtime.modules}
            runtime.add_modules(new, during_call=True)
            return entries[module] if module in new else runtime.modules.get(module)

    def _outermost_call(self, module: Any) -> Any:
        """The module of the outermost ``Module.__call__`` under way on this thread."""
        codes = self._call_codes
        if codes is None:
            codes = self._call_codes = _module_call_codes()
        outermost = module
        frame: Any = sys._getframe(1)
        while frame is not None:
            if frame.f_code in codes:
                caller = frame.f_locals.get("self")
                if isinstance(caller, self._module_type):
                    outermost = caller
            frame = frame.f_back
        return outermost

    def _entries(self, model: Any) -> Dict[Any, ModuleEntry]:
        """``annotate_modules(model)``'s entries; a ``torch.compile``d module is named as
        the module it compiles (its ``_orig_mod``), itself as the root."""
        named = list(model.named_modules())
        # without Dynamo imported (importing it costs), nothing is compiled
        compiled = getattr(sys.modules.get("torch._dynamo.eval_frame"), "OptimizedModule", None)
        if compiled is not None and isinstance(model, compiled):
            named = [("", model), *model._orig_mod.named_modules()]
        entries: Dict[Any, ModuleEntry] = {}
        for name, module in named:
            if module in entries:
                continue
            forward = {self.key: name}
            backward = {**forward, **BACKWARD_PHASE} if self._backward else None
            entries[module] = (self, forward, backward, type(module) in self._quiet_types)
        return entries


def _module_call_codes() -> frozenset:
    """The code objects of the frames a module call runs in: torch's ``Module.__call__``
    (``_wrapped_call_impl`` and ``_call_impl``) and cgfast's wrapper of it."""
    import torch

    from cgfast.capture._module_calls import module_call

    codes: List[Any] = [module_call.__code__]
    for name in ("_wrapped_call_impl", "_call_impl", "__call__"):
        function = getattr(torch.nn.Module, name, None)
        code = getattr(function, "__code__", None)
        if code is not None:
            codes.append(code)
    return frozenset(codes)


def annotate_all_modules(
    *,
    key: str = "module",
    backward: bool = True,
    stacks: bool = False,
    stack_filter_paths: Optional[Sequence[str]] = None,
) -> AllModuleAnnotations:
    """Annotate every graph node captured inside a module's forward with ``{key: <name>}``
    of the innermost module, as :func:`annotate_modules` does, for every model whose
    modules run during a capture, with no handle on it: a model is named from the
    outermost module call under way when one of its modules is first called during a
    capture (the root is ``""``; a ``torch.compile``d model as the model it compiles).
    ``backward``, ``stacks`` and ``stack_filter_paths`` as for :func:`annotate_modules`.

    One such handle at a time (``ValueError`` for a second). ``Module.__call__`` is
    wrapped from the first capture on, not before; ``annotate_modules`` handles take
    precedence over it. Holds annotations on while active."""
    if runtime.module_naming is not None:
        raise ValueError("annotate_all_modules is active already; remove() that handle first")
    return AllModuleAnnotations(
        key=key, backward=backward, stacks=stacks, stack_filter_paths=stack_filter_paths
    )
