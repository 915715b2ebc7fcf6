"""The scopes user and generated code open around launches.

Both are small classes rather than generator context managers: Inductor's generated
code calls ``__enter__``/``__exit__`` by hand around each launch, and the disabled path
must cost next to nothing.
"""

from __future__ import annotations

from typing import Any, ContextManager, Dict, Hashable, Literal, Optional, Union

from cgfast.capture._backward import enter_backward_scope, exit_backward_scope
from cgfast.capture._core import Recorder, ScopeStart
from cgfast.capture._interface import Backend
from cgfast.capture._runtime import never_raises, runtime

AnnotationLike = Union[str, Dict[str, Any]]

_begin_scope = never_raises("reading the capture state at mark_kernels entry")(Recorder.begin_scope)
_end_scope = never_raises("walking the nodes a mark_kernels scope added")(Recorder.end_scope)


def _as_annotation(annotation: AnnotationLike) -> Dict[str, Any]:
    if type(annotation) is str:
        return {"name": annotation}
    if isinstance(annotation, dict):
        return annotation
    raise TypeError(f"an annotation is a str or a dict, not {type(annotation).__name__}")


class mark_kernels:
    """Record ``annotation`` (a dict, or a string recorded as ``{"name": s}``) for every
    kernel, memcpy and memset node the current stream's capture adds inside the scope.

    Outside a capture, while annotations are disabled, or without a backend it does
    nothing. Scopes nest: a node in several scopes gets one dict in which the innermost
    scope wins on common keys.
    """

    __slots__ = ("_annotation", "_backend", "_backward", "_start")

    def __init__(self, annotation: AnnotationLike, *, backward: bool = False) -> None:
        self._annotation = _as_annotation(annotation)
        self._start: Optional[ScopeStart] = None
        self._backend: Optional[Backend] = None
        # backward=True: also the backward of autograd nodes made inside (torch >= 2.14),
        # with "autograd_phase": "backward"; while open, True means "entered" and None
        # "entered on a torch without node creation hooks"
        self._backward: Optional[bool] = backward

    def __enter__(self) -> mark_kernels:
        if not runtime.enabled or runtime.no_capture_in_progress():
            return self
        backend = runtime.backend()
        if backend is None:
            return self
        if self._start is not None:
            raise RuntimeError("this mark_kernels scope is already open; make one per scope")
        stream = backend.streams.capturing_stream()
        if stream is None:
            return self
        self._start = _begin_scope(runtime.recorder, backend, stream)
        if self._start is not None:
            self._backend = backend
            # Snapshot: the caller may reuse or change its dict after the scope.
            self._annotation = dict(self._annotation)
            if self._backward:
                self._backward = enter_backward_scope(self._annotation) or None
        return self

    def __exit__(self, exc_type, exc, traceback) -> Literal[False]:
        start, backend = self._start, self._backend
        if start is None or backend is None:  # both are set together
            return False
        self._start, self._backend = None, None
        if self._backward is None:
            self._backward = True  # entered on a torch without node creation hooks
        elif self._backward:
            exit_backward_scope()
        if exc_type is not None:
            return False  # the capture is failing; what it added is not worth keying
        _end_scope(runtime.recorder, backend, start, self._annotation)
        return False


class mark_stream:
    """Run the scope on ``stream`` and record ``annotation`` with ``"stream": <lane>``,
    a small stable id for that stream (see :func:`lane_for`). When ``stream`` is already
    current there is no switch and no ``"stream"`` key.

    The scope's nodes are found from ``stream``'s own capture frontier when it already
    takes part in the capture, else from the current stream's, which the side stream's
    first work forks from (``stream.wait_stream(current)`` before or inside the scope).
    """

    __slots__ = ("_annotation", "_scope", "_stream", "_switch")

    def __init__(self, stream: Any, annotation: AnnotationLike) -> None:
        self._stream = stream
        self._annotation = _as_annotation(annotation)
        self._scope: Optional[mark_kernels] = None
        self._switch: Optional[ContextManager[object]] = None

    def __enter__(self) -> mark_stream:
        streams = runtime.streams()
        backend = runtime.backend() if runtime.enabled else None
        if backend is None:
            switch = self._switch = streams.use(self._stream)
            switch.__enter__()
            return self
        target = streams.handle(self._stream)
        if target == streams.current_stream():
            scope = self._scope = mark_kernels(self._annotation)
            scope.__enter__()
            return self
        scope = self._scope = mark_kernels(
            {**self._annotation, "stream": runtime.lane(("cuda stream", target))}
        )
        switch = self._switch = streams.use(self._stream)
        if _takes_part_in_a_capture(backend, target):
            # Its work hangs off its own frontier: open the scope there.
            switch.__enter__()
            scope.__enter__()
            return self
        # It will fork from the current stream: open the scope on the current stream's
        # frontier, which the side stream's first work will depend on.
        scope.__enter__()
        try:
            switch.__enter__()
        except BaseException:
            scope.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, exc_type, exc, traceback) -> Literal[False]:
        switch, scope = self._switch, self._scope
        self._switch = self._scope = None
        try:
            if switch is not None:
                switch.__exit__(exc_type, exc, traceback)
        finally:
            if scope is not None:
                scope.__exit__(exc_type, exc, traceback)
        return False


def _takes_part_in_a_capture(backend: Backend, stream: int) -> bool:
    if backend.streams.capturing_stream() is None:
        return False  # no capture on the current stream: the scope records nothing anyway
    return _stream_captures(backend, stream)


@never_raises("reading a side stream's capture state", default=False)
def _stream_captures(backend: Backend, stream: int) -> bool:
    return backend.graphs.capture_state(stream) is not None


def lane_for(key: Hashable) -> int:
    """A small stable lane id (from 60 up) for ``key``, e.g. a process group's name. A
    CUDA stream gets the lane :class:`mark_stream` gives it."""
    if hasattr(key, "cuda_stream"):
        return runtime.lane(("cuda stream", runtime.streams().handle(key)))
    return runtime.lane(("key", key))
