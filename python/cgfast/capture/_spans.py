"""Spans: the nodes a scope created, as the capture graph's node count at its start and
end (local ids count a graph's nodes in creation order), resolved against the graph's
kernel, memcpy and memset nodes once, at capture end (``Recorder.end_span``)."""

from __future__ import annotations

from typing import Optional

from cgfast.capture._core import SpanStart
from cgfast.capture._interface import Backend
from cgfast.capture._runtime import runtime


def begin_span(backend: Backend) -> Optional[SpanStart]:
    """A span on the current stream's capture, or ``None`` when it does not capture.
    While every capture is counted, a stream seen capturing into a recorded top-level
    graph is remembered (``runtime.stream_graphs``) until a capture begins or ends."""
    streams = backend.streams
    recorder = runtime.recorder
    if runtime.uncounted_capture or not runtime.patched_classes:
        stream = streams.capturing_stream()
        return recorder.begin_span(backend, stream) if stream is not None else None
    stream = streams.current_stream()
    known = runtime.stream_graphs.get(stream)
    if known is not None:
        return SpanStart(known[0], known[1], backend.graphs.node_count(known[0]))
    if streams.capturing_stream() is None:
        return None
    start = recorder.begin_span(backend, stream)
    if start is not None and recorder.is_capture_graph(start.graph):
        runtime.stream_graphs[stream] = (start.graph, start.graph_id)
    return start
