"""Turning annotations on and off: ``enable_annotations()`` / ``disable_annotations()``,
and the blocks that hold them on while they run (``recording()``, ``graph``)."""

from __future__ import annotations

from typing import Any, Literal, Optional, Sequence

from cgfast.capture import _patches, _stacks
from cgfast.capture._runtime import runtime


def enable_annotations(*, choose_backend: bool = True) -> None:
    """Record annotations from now on: choose the id source, if not done yet, and
    :func:`install` the patches, so every capture through ``torch.cuda.CUDAGraph`` is
    resolved and remapped by itself and scopes outside a capture ask no driver.
    With ``choose_backend=False`` the id source is chosen when the first capture
    begins, so that a process that never captures never calls the driver."""
    if not choose_backend:
        _patches.install()  # before annotations go on: installing then chooses
        runtime.switch_on()
        return
    runtime.switch_on()
    runtime.backend()
    _patches.install()


def disable_annotations() -> None:
    """Record nothing from now on, also inside the ``recording()`` blocks and while the
    ``annotate_modules`` handles active now are; a block or handle begun later records."""
    runtime.switch_off()


def annotations_enabled() -> bool:
    return runtime.enabled


class recording:
    """Enable annotations for the dynamic extent of the block (as they were after it)
    with :func:`install`'s patches active, so every capture inside is recorded, resolved
    at capture end and remapped after instantiation. Nothing recorded earlier is
    cleared; warm-up runs outside a capture record nothing. ``stacks``,
    ``stack_filter_paths`` and ``flops`` as for :func:`annotate_modules`."""

    __slots__ = ("_flops", "_holds", "_stack_filter_paths", "_stacks")

    def __init__(
        self, *, stacks: bool = False, stack_filter_paths: Optional[Sequence[str]] = None, flops: bool = False
    ) -> None:
        self._holds: list = []  # one per __enter__ not exited yet (a block may nest in itself)
        # also record each node's launch frames, its op's counts (see annotate_modules)
        self._stacks = stacks
        self._stack_filter_paths = stack_filter_paths
        self._flops = flops

    def __enter__(self) -> recording:
        paths = _stacks.filter_paths(self._stack_filter_paths) if self._stacks else None
        self._holds.append(runtime.hold())
        runtime.backend()  # choose the id source now, before any capture is under way
        _patches.install()
        if self._stacks:
            runtime.request_stacks(self, paths)
        if self._flops:
            runtime.request_counts(self)
        if self._stacks or self._flops:
            _patches.sync()
        return self

    def __exit__(self, exc_type, exc, traceback) -> Literal[False]:
        runtime.release(self._holds.pop())
        if self._stacks:
            runtime.release_stacks(self)
        if self._flops:
            runtime.release_counts(self)
        if self._stacks or self._flops:
            _patches.sync()
        return False


class compiled_code_capture:
    """The captures begun in the block run compiled code (Inductor's cudagraphs): no
    module is called in them, so ``Module.__call__`` is not wrapped for them."""

    __slots__ = ()

    def __enter__(self) -> compiled_code_capture:
        runtime.compiled_captures += 1
        return self

    def __exit__(self, exc_type, exc, traceback) -> Literal[False]:
        runtime.compiled_captures -= 1
        return False


class graph:
    """``torch.cuda.graph(...)`` (same arguments) with annotations recorded for this
    capture: resolved and remapped when it ends, or at ``instantiate()`` for graphs
    made with ``keep_graph=True``."""

    def __init__(self, cuda_graph: Any, *args: Any, **kwargs: Any) -> None:
        import torch

        self._capture = torch.cuda.graph(cuda_graph, *args, **kwargs)
        self._recording = recording()

    def __enter__(self):
        self._recording.__enter__()
        try:
            return self._capture.__enter__()
        except BaseException:
            self._recording.__exit__(None, None, None)
            raise

    def __exit__(self, exc_type, exc, traceback):
        try:
            return self._capture.__exit__(exc_type, exc, traceback)
        finally:
            self._recording.__exit__(None, None, None)

    def __getattr__(self, name: str) -> Any:
        try:
            capture = self.__dict__["_capture"]
        except KeyError:
            raise AttributeError(name) from None
        return getattr(capture, name)
