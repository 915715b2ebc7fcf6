"""Process-wide state: whether annotations are on, the recorder, and the backend, which
is chosen once, lazily, the first time something needs it (never at import)."""

from __future__ import annotations

import logging
import threading
from typing import List, Optional, Tuple

from cgfast.capture._core import Recorder
from cgfast.capture._interface import Backend, StreamOps

logger = logging.getLogger("cgfast.capture")


class TorchStreams:
    """:class:`~cgfast.capture._interface.StreamOps` on torch's current-stream state."""

    def __init__(self) -> None:
        import torch

        self._torch = torch
        self._is_capturing = torch._C._cuda_isCurrentStreamCapturing
        self._raw_stream = torch._C._cuda_getCurrentRawStream
        self._device = torch._C._cuda_getDevice

    def capturing_stream(self) -> Optional[int]:
        if not self._is_capturing():
            return None
        return self._raw_stream(self._device())

    def current_stream(self) -> int:
        return self._raw_stream(self._device())

    def handle(self, stream: object) -> int:
        # any object with a cuda_stream: torch.cuda.Stream, ExternalStream, a user's own
        return stream.cuda_stream  # type: ignore[attr-defined]

    def use(self, stream: object):
        # StreamOps takes any stream object; torch itself rejects what is not a Stream
        return self._torch.cuda.stream(stream)  # type: ignore[arg-type]


class State:
    def __init__(self) -> None:
        self.enabled = False
        self.recorder = Recorder()
        # While a graph class is patched, its captures are counted: with none in
        # progress a scope need not ask the driver whether its stream is capturing.
        self.patched_classes = 0
        self.captures_in_progress = 0
        # A capture that began before the patches (its end is still seen by them).
        self.uncounted_capture = False
        # called after each count change (annotate_modules hooks modules only meanwhile)
        self.capture_listeners: List = []
        self._count_lock = threading.Lock()
        self._selected = False
        self._backend: Optional[Backend] = None
        self._reason = "not chosen yet"
        self._streams: Optional[StreamOps] = None
        self._lock = threading.Lock()

    def capture_began(self) -> None:
        with self._count_lock:
            self.captures_in_progress += 1
        self._tell_listeners()

    def capture_over(self) -> None:
        with self._count_lock:
            self.captures_in_progress = max(0, self.captures_in_progress - 1)
        self._tell_listeners()

    def _tell_listeners(self) -> None:
        for listener in self.capture_listeners:
            try:
                listener()
            except Exception:  # never break the capture itself
                self.recorder.report_failure("updating annotation hooks at a capture's begin or end")

    def no_capture_in_progress(self) -> bool:
        """True only when every capture goes through a patched class and none is open."""
        return self.patched_classes > 0 and self.captures_in_progress == 0 and not self.uncounted_capture

    def backend(self) -> Optional[Backend]:
        """The backend in use, choosing it on first call; ``None`` when there is none."""
        if self._selected:
            return self._backend
        with self._lock:
            if not self._selected:
                backend, reason = choose_backend()
                self._backend, self._reason, self._selected = backend, reason, True
                if backend is None:
                    logger.warning("cgfast.capture: annotations cannot be recorded: %s", reason)
                else:
                    logger.info("cgfast.capture: graph node ids from %s", backend.description)
        return self._backend

    def describe(self) -> str:
        backend = self.backend()
        return backend.description if backend is not None else f"none: {self._reason}"

    def streams(self) -> StreamOps:
        """The backend's stream operations; torch's while none is chosen and annotations
        are off (switching streams and naming lanes need no id source)."""
        if self._selected or self.enabled:
            backend = self.backend()
            if backend is not None:
                return backend.streams
        if self._streams is None:
            self._streams = TorchStreams()
        return self._streams

    def use_backend(
        self, backend: Optional[Backend], *, reason: str = "", streams: Optional[StreamOps] = None
    ) -> None:
        """Use ``backend`` from now on instead of choosing one (tests, embedders); with
        ``None``, record nothing, for ``reason``, switching streams with ``streams``."""
        with self._lock:
            self._backend = backend
            self._reason = reason or "no backend was given"
            self._streams = streams
            self._selected = True

    def forget_backend(self) -> None:
        """Choose again on next use."""
        with self._lock:
            self._backend, self._streams, self._selected = None, None, False
            self._reason = "not chosen yet"


state = State()


def choose_backend() -> Tuple[Optional[Backend], str]:
    """The first working id source (tools-id, then CUPTI), checked on a throwaway graph,
    with ctypes graph traversal on libcuda; or ``None`` and why."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "torch.cuda is not available (no GPU, or torch without CUDA)"

    from cgfast.capture._id_sources import (
        CuptiIdSource,
        IdSourceUnavailable,
        ToolsIdSource,
        agree,
        libcupti_candidates,
        verify,
    )
    from cgfast.capture._libcuda import CudaError, LibcudaGraphs

    try:
        graphs = LibcudaGraphs.load()
    except (OSError, CudaError) as exc:
        return None, f"the CUDA driver cannot be called through ctypes: {exc}"
    streams = TorchStreams()
    # Instantiating the probe graph is no stream work, but stay clear of a live capture.
    instantiate = streams.capturing_stream() is None
    cuda_major = int(torch.version.cuda.split(".")[0]) if torch.version.cuda else None
    failures: List[str] = []
    try:
        with graphs.probe_graph(torch.cuda.current_device(), instantiate) as probe:
            tools = None
            try:
                tools = ToolsIdSource()
                verify(tools, probe)
            except IdSourceUnavailable as exc:
                tools = None
                failures.append(f"tools-id: {exc}")
            cupti = None
            cupti_failures = []
            for path in libcupti_candidates(cuda_major):
                try:
                    candidate = CuptiIdSource(path)
                    verify(candidate, probe)
                except IdSourceUnavailable as exc:
                    cupti_failures.append(str(exc))
                    continue
                cupti = candidate
                break
            if cupti is None:
                failures.append("cupti: " + ("; ".join(cupti_failures[:3]) or "no libcupti found"))
            chosen = tools or cupti
            if tools is not None and cupti is not None:
                mismatch = agree(tools, cupti, probe)
                if mismatch is not None:
                    logger.warning(
                        "cgfast.capture: the two id sources disagree (%s); using CUPTI's, "
                        "which is what the profiler reports",
                        mismatch,
                    )
                    chosen = cupti
    except CudaError as exc:
        return None, f"could not make a probe graph: {exc}"
    if chosen is None:
        return None, "no graph node id source works: " + "; ".join(failures)
    return Backend(graphs, chosen, streams, chosen.description), ""
