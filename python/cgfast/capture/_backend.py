"""Which backend answers graph queries: the id source (tools ids through cuda-bindings,
else CUPTI, else none and why), with ctypes graph traversal on ``libcuda`` and torch's
current-stream state."""

from __future__ import annotations

import logging
from typing import List, Optional, Tuple

from cgfast.capture._id_sources import (
    CuptiIdSource,
    IdSourceUnavailable,
    ToolsIdSource,
    agree,
    libcupti_candidates,
    verify,
)
from cgfast.capture._interface import Backend
from cgfast.capture._libcuda import CudaError, LibcudaGraphs

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


def choose_backend() -> Tuple[Optional[Backend], str]:
    """The first working id source (tools-id, then CUPTI), checked on a throwaway graph,
    with ctypes graph traversal on libcuda; or ``None`` and why."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "torch.cuda is not available (no GPU, or torch without CUDA)"
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
