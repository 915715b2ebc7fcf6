"""What happens where a capture begins, ends and is instantiated (``_patches`` calls these
from ``torch.cuda.CUDAGraph``'s methods).

At ``capture_begin`` the capture graph's id is noted on the graph object; before
``capture_end`` the scopes are resolved and the topology recorded while the capture
graph is still alive (with ``keep_graph=False`` torch destroys it inside
``capture_end``); after ``instantiate`` (or a ``replay`` that instantiated: torch <= 2.14
does that for ``keep_graph`` graphs without going through Python's ``instantiate``)
the annotations are rekeyed to the executable graph. Each graph object carries its own
:class:`GraphKeys`, so remapping one graph never touches another's keys.
"""

from __future__ import annotations

from typing import Any, Optional

from cgfast.capture._core import Recorder
from cgfast.capture._interface import Backend
from cgfast.capture._runtime import never_raises, runtime

KEYS_ATTR = "_cgfast_keys"


class GraphKeys:
    """The capture graph's id, and the graph id its annotations are keyed by now."""

    __slots__ = ("capture_graph", "capture_id", "key_id")

    def __init__(self, capture_id: int, capture_graph: Optional[int]) -> None:
        self.capture_id = capture_id
        self.key_id = capture_id
        # the live cudaGraph_t until the capture has been resolved
        self.capture_graph = capture_graph


def _current_capture(when: str) -> Optional[GraphKeys]:
    """The keys of the graph the current stream captures into; ``None`` without a
    backend or a capture (a failed driver query is reported, naming ``when``)."""
    with never_raises(f"reading the capture graph at {when}"):
        backend = runtime.backend()
        if backend is None:
            return None
        stream = backend.streams.capturing_stream()
        if stream is None:
            return None
        capture = backend.graphs.capture_state(stream)
        if capture is None:
            return None
        return GraphKeys(backend.ids.graph_id(capture.graph), capture.graph)
    return None


def _record_capture(cuda_graph: Any, keys: GraphKeys) -> None:
    setattr(cuda_graph, KEYS_ATTR, keys)
    if keys.capture_graph is not None:  # always, for keys of a capture under way
        runtime.recorder.capture_started(keys.capture_graph)


def on_capture_begin(cuda_graph: Any) -> None:
    setattr(cuda_graph, KEYS_ATTR, None)  # captured; recorded only if stamped below
    if not runtime.enabled:
        return
    keys = _current_capture("capture begin")
    if keys is not None:
        _record_capture(cuda_graph, keys)


def take_over_capture(cuda_graph: Any) -> None:
    """Before the end of a capture that was not being recorded (begun before
    ``install()`` or while annotations were off): if scopes recorded nodes of it, record
    it from here on so they are resolved and remapped like any other."""
    if not runtime.recorder.has_pending():
        return
    keys = _current_capture("capture end")
    if keys is not None and runtime.recorder.has_pending(keys.capture_id):
        _record_capture(cuda_graph, keys)


def on_capture_end(cuda_graph: Any) -> None:
    """Before the capture ends."""
    keys = getattr(cuda_graph, KEYS_ATTR, None)
    if keys is None:
        return
    with never_raises("resolving scopes at capture end"):
        _finish_capture(runtime.backend(), keys)


def on_capture_failed(cuda_graph: Any) -> None:
    keys = getattr(cuda_graph, KEYS_ATTR, None)
    if keys is not None:
        runtime.recorder.drop_graphs([keys.key_id])
        setattr(cuda_graph, KEYS_ATTR, None)


def on_instantiated(cuda_graph: Any) -> None:
    keys = getattr(cuda_graph, KEYS_ATTR, None)
    if keys is None:
        return
    with never_raises("remapping annotations to the executable graph"):
        _remap(runtime.backend(), cuda_graph, keys)


def _finish_capture(backend: Optional[Backend], keys: GraphKeys) -> None:
    graph = keys.capture_graph
    if graph is None:
        return
    keys.capture_graph = None
    recorder = runtime.recorder
    recorder.capture_ended(graph)
    if backend is None:  # taken away since the capture began (use_backend(None))
        recorder.set_annotatable(keys.capture_id, [], 0)  # its spans resolve to nothing
    else:
        _read_captured_nodes(recorder, backend, graph, keys.capture_id)
    recorder.resolve()
    recorder.forget_annotatable_nodes(keys.capture_id)


def _read_captured_nodes(recorder: Recorder, backend: Backend, graph: int, capture_id: int) -> None:
    with never_raises("recording the topology of a captured graph") as topology:
        # Also tells which local ids are kernels, memcpys and memsets: what spans need.
        recorder.record_topology(backend, graph, capture_id)
    if not topology.failed:
        return
    recorder.forget_annotatable_nodes(capture_id)
    with never_raises("reading the nodes of a captured graph") as nodes:
        recorder.note_annotatable_nodes(backend, graph, capture_id)
    if nodes.failed:
        recorder.set_annotatable(capture_id, [], 0)  # its spans resolve to nothing


def _remap(backend: Optional[Backend], cuda_graph: Any, keys: GraphKeys) -> None:
    _finish_capture(backend, keys)  # when capture_end was bypassed (capture_end_pre/post)
    runtime.recorder.resolve()
    if backend is None:  # taken away since the capture: no id for the executable graph
        return
    exec_id = backend.ids.exec_id(cuda_graph.raw_cuda_graph_exec())
    if exec_id != keys.key_id:
        runtime.recorder.rekey(keys.key_id, exec_id)
        keys.key_id = exec_id


def _has_exec(cuda_graph: Any) -> bool:
    has_exec = getattr(cuda_graph, "_has_graph_exec", None)  # torch >= 2.15
    if has_exec is not None:
        return bool(has_exec)
    try:
        cuda_graph.raw_cuda_graph_exec()
    except RuntimeError:  # keep_graph=True and not instantiated yet
        return False
    return True


def _raw_graph(cuda_graph: Any) -> Optional[int]:
    try:
        raw = cuda_graph.raw_cuda_graph()
    except (RuntimeError, AttributeError):
        return None
    return int(raw) or None


def notice_a_capture_begun_earlier() -> None:
    """A capture already under way when recording starts (``recording()`` entered inside
    ``torch.cuda.graph``) was not counted: until it ends, scopes ask the driver."""
    if not runtime.enabled or runtime.captures_in_progress or runtime.uncounted_capture:
        return
    if not runtime.backend_chosen:
        return  # annotations went on to choose it at the first capture (cgfast run)
    backend = runtime.backend()
    if backend is None:
        return
    with never_raises("asking whether the current stream captures"):
        if backend.streams.capturing_stream() is not None:
            runtime.notice_uncounted_capture()


def remap_to_exec_graph(cuda_graph: Any) -> None:
    """Resolve pending scopes and rekey ``cuda_graph``'s annotations (and topology) from
    wherever they are keyed now (its capture graph, or its previous instance) to its
    current executable graph. The patched capture path does this by itself."""
    if not hasattr(cuda_graph, "raw_cuda_graph_exec"):
        raise TypeError(f"expected a torch.cuda.CUDAGraph, got {type(cuda_graph).__name__}")
    runtime.recorder.resolve()
    backend = runtime.backend()
    if backend is None:
        return
    keys: Optional[GraphKeys]
    if hasattr(cuda_graph, KEYS_ATTR):
        keys = getattr(cuda_graph, KEYS_ATTR)
    else:  # never captured while install()'s patches were on
        raw = _raw_graph(cuda_graph)
        if raw is None:
            raise RuntimeError(
                "this graph's capture id is unknown: capture it inside cgfast.capture.graph() "
                "or recording(), or call cgfast.capture.install() before capturing "
                "(or capture with keep_graph=True)"
            )
        keys = GraphKeys(backend.ids.graph_id(raw), raw)
        setattr(cuda_graph, KEYS_ATTR, keys)
    if keys is None:
        return  # captured while annotations were off
    _remap(backend, cuda_graph, keys)


def stamp_name(exec_id: int) -> str:
    """The profiler range a recorded graph's replays run in (``cgfast annotate`` reads
    it to tell graphs of identical kernels apart)."""
    return f"cgfast.replay {exec_id}"


def stamped_replay(cuda_graph: Any, original) -> Any:
    """Replay ``cuda_graph`` inside a ``cgfast.replay <exec id>`` profiler range (only
    graphs whose annotations are recorded: their executable id is known)."""
    keys = getattr(cuda_graph, KEYS_ATTR, None)
    if keys is not None and keys.key_id == keys.capture_id:
        # not remapped yet: a keep_graph graph that replay would instantiate (torch <= 2.14)
        if not _has_exec(cuda_graph) and hasattr(cuda_graph, "instantiate"):
            cuda_graph.instantiate()
        else:
            on_instantiated(cuda_graph)
    if keys is None or keys.key_id == keys.capture_id:
        return original(cuda_graph)
    import torch

    with torch.autograd.profiler.record_function(stamp_name(keys.key_id)):
        return original(cuda_graph)
