"""Spans: the nodes a scope created, as the capture graph's node count at its start and
end (local ids count a graph's nodes in creation order), resolved against the graph's
kernel, memcpy and memset nodes once, at capture end (``Recorder.end_span``)."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from cgfast.capture._core import SpanStart
from cgfast.capture._state import state

# stream -> (graph, graph id) of streams seen capturing into a recorded top-level graph
# since the last capture began or ended: later spans on them ask the driver only for
# the node count. Used only while every capture is counted (see begin_span).
stream_graphs: Dict[int, Tuple[int, int]] = {}


def begin_span(backend) -> Optional[SpanStart]:
    """A span on the current stream's capture, or ``None`` when it does not capture."""
    streams = backend.streams
    recorder = state.recorder
    if state.uncounted_capture or not state.patched_classes:
        stream = streams.capturing_stream()
        return recorder.begin_span(backend, stream) if stream is not None else None
    stream = streams.current_stream()
    known = stream_graphs.get(stream)
    if known is not None:
        return SpanStart(known[0], known[1], backend.graphs.node_count(known[0]))
    if streams.capturing_stream() is None:
        return None
    start = recorder.begin_span(backend, stream)
    if start is not None and recorder.is_capture_graph(start.graph):
        stream_graphs[stream] = (start.graph, start.graph_id)
    return start


def _forget() -> None:
    """A capture began or ended: a stream's graph, and a graph handle's id, may change."""
    stream_graphs.clear()
    state.recorder.forget_graph_ids()


state.capture_listeners.append(_forget)
