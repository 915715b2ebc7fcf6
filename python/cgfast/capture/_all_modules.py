"""``annotate_all_modules``: every ``nn.Module`` that runs during a capture is named by its
path from the outermost module called (the model), with no handle on the model.

While a handle is active the runtime's ``module_naming`` is a :class:`ModuleNaming`
(one, however many handles share it). The first time a module no handle registered is
called during a capture, the module-call wrapper asks it for an entry: it finds the
outermost module call under way on the thread (torch's ``Module.__call__`` frames, also
those begun before the capture or before the wrapper was put in), and registers that
model's modules as ``annotate_modules(model)`` would, so what is recorded is the same.
A module outside the tree of the model calling it is left unregistered, as
``annotate_modules`` leaves it. Handles of ``annotate_modules`` take precedence: they
replace these entries.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Dict, List, Literal, Optional, Sequence

from cgfast.capture import _patches, _stacks
from cgfast.capture._modules import module_entries, release_requests
from cgfast.capture._runtime import ModuleEntry, never_raises, runtime


class ModuleNaming:
    """The runtime's ``module_naming`` while any :class:`AllModuleAnnotations` handle is
    active: it registers the models it meets (see the module's doc) and owns their
    entries."""

    # its entries give way to an annotate_modules handle's (see add_modules)
    yields_to_handles = True

    def __init__(self, key: str, backward: bool) -> None:
        import torch

        self.key = key
        self.backward = backward
        self.handles = 0
        self._module_type = torch.nn.Module
        self._call_codes: Optional[frozenset] = None
        self._foreign: weakref.WeakSet = weakref.WeakSet()

    @never_raises("naming a module called during a capture")
    def entry_for(self, module: Any) -> Optional[ModuleEntry]:
        """The entry of ``module``, called during a capture and registered by no handle:
        its model's modules are registered first (``None`` once naming has stopped)."""
        with runtime.modules_lock:
            if runtime.module_naming is not self:
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

    def stop(self) -> None:
        """No handle is left: forget every model met."""
        with runtime.modules_lock:
            runtime.set_module_naming(None)
            mine = [module for module, entry in runtime.modules.items() if entry[0] is self]
            runtime.remove_modules(self, mine)

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
        return module_entries(self, named, self.key, self.backward)


class AllModuleAnnotations:
    """What :func:`annotate_all_modules` returns: ``remove()`` (or leaving its ``with``
    block) ends it; removing twice is harmless. Naming stops when no handle is left."""

    def __init__(
        self,
        *,
        key: str,
        backward: bool,
        stacks: bool,
        stack_filter_paths: Optional[Sequence[str]],
        flops: bool = False,
    ) -> None:
        if not isinstance(key, str) or not key:
            raise TypeError("annotate_all_modules: key must be a non-empty str")
        paths = _stacks.filter_paths(stack_filter_paths) if stacks else None
        with runtime.modules_lock:
            naming = runtime.module_naming
            if naming is None:
                naming = ModuleNaming(key, backward)
            elif (naming.key, naming.backward) != (key, backward):
                raise ValueError(
                    f"annotate_all_modules(key={naming.key!r}, backward={naming.backward}) is active already: "
                    "another key or backward needs that handle removed first"
                )
            naming.handles += 1
        self._naming: Optional[ModuleNaming] = naming
        self._stacks = stacks
        # patched before annotations go on, so that no id source is chosen until a capture
        _patches.install()
        runtime.set_module_naming(naming)
        self._hold: Optional[int] = runtime.hold()
        if stacks:
            runtime.request_stacks(self, paths)
        self._flops = flops
        if flops:
            runtime.request_counts(self)
        _patches.sync()

    @property
    def active(self) -> bool:
        return self._naming is not None

    def remove(self) -> None:
        with runtime.modules_lock:
            naming, self._naming = self._naming, None
            if naming is None:
                return
            naming.handles -= 1
            if naming.handles == 0:
                naming.stop()
        release_requests(self)

    def __enter__(self) -> AllModuleAnnotations:
        return self

    def __exit__(self, exc_type, exc, traceback) -> Literal[False]:
        self.remove()
        return False


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
    flops: bool = False,
) -> AllModuleAnnotations:
    """Annotate every graph node captured inside a module's forward with ``{key: <name>}``
    of the innermost module, as :func:`annotate_modules` does, for every model whose
    modules run during a capture, with no handle on it: a model is named from the
    outermost module call under way when one of its modules is first called during a
    capture (the root is ``""``; a ``torch.compile``d model as the model it compiles).
    ``backward``, ``stacks``, ``stack_filter_paths`` and ``flops`` as for
    :func:`annotate_modules`.

    Handles may overlap (``cgfast run`` holds one) as long as they agree on ``key`` and
    ``backward`` (``ValueError`` otherwise); naming stops when the last is removed.
    ``Module.__call__`` is wrapped from the first capture on, not before;
    ``annotate_modules`` handles take precedence. Holds annotations on while active."""
    return AllModuleAnnotations(
        key=key, backward=backward, stacks=stacks, stack_filter_paths=stack_filter_paths, flops=flops
    )
