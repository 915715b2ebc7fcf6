"""``annotate_modules``: every graph node a module's forward (and, through autograd, its
backward) creates during capture is annotated with the module's name.

A handle registers its model's modules in ``runtime.modules`` and holds annotations on
while it is active; ``torch.nn.Module.__call__`` is wrapped meanwhile (``_patches``), and
the wrapper (``_module_calls``) records each registered module's spans during captures.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Literal, Optional, Sequence, Tuple

from cgfast.capture import _patches, _stacks
from cgfast.capture._backward import BACKWARD_PHASE
from cgfast.capture._runtime import ModuleEntry, runtime


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
        flops: bool = False,
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
        paths = _stacks.filter_paths(stack_filter_paths) if stacks else None
        self.model = model
        self.key = key
        named = (
            ((f"{prefix}.{name}" if name else prefix, module) for name, module in model.named_modules())
            if prefix
            else model.named_modules()
        )
        entries = module_entries(self, named, key, backward)
        runtime.add_modules(entries)
        self._modules = list(entries)
        self._hold: Optional[int] = runtime.hold()
        runtime.backend()  # choose the id source now, before any capture is under way
        _patches.install()
        self._stacks = stacks
        if stacks:
            runtime.request_stacks(self, paths)
        self._flops = flops
        if flops:
            runtime.request_counts(self)
        _patches.sync()

    @property
    def active(self) -> bool:
        return bool(self._modules)

    def remove(self) -> None:
        with runtime.modules_lock:
            if not self._modules:
                return
            modules, self._modules = self._modules, []
            runtime.remove_modules(self, modules)
        release_requests(self)

    def __enter__(self) -> ModuleAnnotations:
        return self

    def __exit__(self, exc_type, exc, traceback) -> Literal[False]:
        self.remove()
        return False


def module_entries(
    owner: Any, named: Iterable[Tuple[str, Any]], key: str, backward: bool
) -> Dict[Any, ModuleEntry]:
    """The registry entries of ``owner`` for ``(name, module)`` pairs, a module named by
    its first pair: ``{key: name}`` forward, with the backward phase when ``backward``."""
    import torch

    quiet_types = (torch.nn.Identity, torch.nn.Dropout)
    entries: Dict[Any, ModuleEntry] = {}
    for name, module in named:
        if module not in entries:
            forward = {key: name}
            entries[module] = (
                owner,
                forward,
                {**forward, **BACKWARD_PHASE} if backward else None,
                type(module) in quiet_types,
            )
    return entries


def release_requests(handle: Any) -> None:
    """What a module handle asked for besides its modules, given back: its launch-stack and
    op-count requests and its hold on annotations (``_stacks``, ``_flops``, ``_hold``)."""
    if handle._stacks:
        runtime.release_stacks(handle)
    if handle._flops:
        runtime.release_counts(handle)
    _patches.sync()
    if handle._hold is not None:
        runtime.release(handle._hold)
        handle._hold = None


def annotate_modules(
    model: Any,
    *,
    prefix: Optional[str] = None,
    key: str = "module",
    backward: bool = True,
    stacks: bool = False,
    stack_filter_paths: Optional[Sequence[str]] = None,
    flops: bool = False,
) -> ModuleAnnotations:
    """Annotate every graph node captured inside a forward of ``model`` or one of its
    submodules with ``{key: <name>}`` of the innermost one, named as
    ``model.named_modules()`` names it (``prefix.`` before it; the root is ``prefix``
    or ``""``). With ``backward``, nodes its backward creates during a captured
    backward get that annotation plus ``"autograd_phase": "backward"``.

    Wraps ``torch.nn.Module.__call__`` while active (no hook on any module, and no
    global hook sending every module call down torch's slower path), so
    ``torch.cuda.make_graphed_callables`` accepts the model; outside captures a module
    call costs a flag check more. Holds annotations on (like :func:`recording`) and
    ``install()``s while active; after the handle's ``remove()`` they are as they would
    be without it. Composes with ``mark_kernels`` scopes: the innermost scope wins on common
    keys.

    With ``stacks``, every node also gets the user Python frames that launched it
    (see :func:`get_kernel_stacks`), filtered like torch 2.15 filters them or by the
    directories in ``stack_filter_paths``.

    With ``flops``, every op run during a capture is counted, FLOPs by
    ``torch.utils.flop_counter``'s formulas and bytes as the sizes of its tensor
    arguments and results, and its nodes get the counts (see
    :func:`get_kernel_op_counts`): a module's nodes sum to ``FlopCounterMode``'s FLOPs
    for it."""
    return ModuleAnnotations(
        model,
        prefix=prefix,
        key=key,
        backward=backward,
        stacks=stacks,
        stack_filter_paths=stack_filter_paths,
        flops=flops,
    )
