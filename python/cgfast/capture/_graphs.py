"""Where a capture begins, ends and is instantiated: ``torch.cuda.CUDAGraph``'s methods.

``install()`` wraps ``capture_begin`` (note the capture graph's id on the graph
object), ``capture_end`` (resolve the scopes and record the topology while the capture
graph is still alive: with ``keep_graph=False`` torch destroys it inside
``capture_end``), and ``instantiate``/``replay`` (rekey to the executable graph; torch
<= 2.14 instantiates ``keep_graph`` graphs inside ``replay`` without going through
Python's ``instantiate``). Each graph object carries its own :class:`GraphKeys`, so
remapping one graph never touches another's keys.
"""

from __future__ import annotations

import functools
from typing import Any, List, Literal, Optional

from cgfast.capture._core import Recorder
from cgfast.capture._interface import Backend
from cgfast.capture._state import state

_KEYS_ATTR = "_cgfast_keys"
_COUNTED_ATTR = "_cgfast_counted"
_ORIGINALS_ATTR = "_cgfast_original_methods"
_HOOKED_METHODS = ("capture_begin", "capture_end", "instantiate", "replay")
_INHERITED = object()


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
    try:
        backend = state.backend()
        if backend is None:
            return None
        stream = backend.streams.capturing_stream()
        if stream is None:
            return None
        capture = backend.graphs.capture_state(stream)
        if capture is None:
            return None
        return GraphKeys(backend.ids.graph_id(capture.graph), capture.graph)
    except Exception:  # annotation must never break the capture
        state.recorder.report_failure(f"reading the capture graph at {when}")
        return None


def _record_capture(cuda_graph: Any, keys: GraphKeys) -> None:
    setattr(cuda_graph, _KEYS_ATTR, keys)
    if keys.capture_graph is not None:  # always, for keys of a capture under way
        state.recorder.capture_started(keys.capture_graph)


def on_capture_begin(cuda_graph: Any) -> None:
    setattr(cuda_graph, _KEYS_ATTR, None)  # captured; recorded only if stamped below
    if not state.enabled:
        return
    keys = _current_capture("capture begin")
    if keys is not None:
        _record_capture(cuda_graph, keys)


def take_over_capture(cuda_graph: Any) -> None:
    """Before the end of a capture that was not being recorded (begun before
    ``install()`` or while annotations were off): if scopes recorded nodes of it, record
    it from here on so they are resolved and remapped like any other."""
    if not state.recorder.has_pending():
        return
    keys = _current_capture("capture end")
    if keys is not None and state.recorder.has_pending(keys.capture_id):
        _record_capture(cuda_graph, keys)


def on_capture_end(cuda_graph: Any) -> None:
    """Before the capture ends."""
    keys = getattr(cuda_graph, _KEYS_ATTR, None)
    if keys is None:
        return
    try:
        _finish_capture(state.backend(), keys)
    except Exception:  # annotation must never break the capture
        state.recorder.report_failure("resolving scopes at capture end")


def on_capture_failed(cuda_graph: Any) -> None:
    keys = getattr(cuda_graph, _KEYS_ATTR, None)
    if keys is not None:
        state.recorder.drop_graphs([keys.key_id])
        setattr(cuda_graph, _KEYS_ATTR, None)


def on_instantiated(cuda_graph: Any) -> None:
    keys = getattr(cuda_graph, _KEYS_ATTR, None)
    if keys is None:
        return
    try:
        _remap(state.backend(), cuda_graph, keys)
    except Exception:  # annotation must never break the capture
        state.recorder.report_failure("remapping annotations to the executable graph")


def _finish_capture(backend: Optional[Backend], keys: GraphKeys) -> None:
    graph = keys.capture_graph
    if graph is None:
        return
    keys.capture_graph = None
    recorder = state.recorder
    recorder.capture_ended(graph)
    if backend is None:  # taken away since the capture began (use_backend(None))
        recorder.set_annotatable(keys.capture_id, [], 0)  # its spans resolve to nothing
    else:
        _read_captured_nodes(recorder, backend, graph, keys.capture_id)
    recorder.resolve()
    recorder.forget_annotatable_nodes(keys.capture_id)


def _read_captured_nodes(recorder: Recorder, backend: Backend, graph: int, capture_id: int) -> None:
    try:
        # Also tells which local ids are kernels, memcpys and memsets: what spans need.
        recorder.record_topology(backend, graph, capture_id)
    except Exception:  # annotation must never break the capture
        recorder.report_failure("recording the topology of a captured graph")
        recorder.forget_annotatable_nodes(capture_id)
        try:
            recorder.note_annotatable_nodes(backend, graph, capture_id)
        except Exception:  # annotation must never break the capture
            recorder.report_failure("reading the nodes of a captured graph")
            recorder.set_annotatable(capture_id, [], 0)  # its spans resolve to nothing


def _remap(backend: Optional[Backend], cuda_graph: Any, keys: GraphKeys) -> None:
    _finish_capture(backend, keys)  # when capture_end was bypassed (capture_end_pre/post)
    state.recorder.resolve()
    if backend is None:  # taken away since the capture: no id for the executable graph
        return
    exec_id = backend.ids.exec_id(cuda_graph.raw_cuda_graph_exec())
    if exec_id != keys.key_id:
        state.recorder.rekey(keys.key_id, exec_id)
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


def remap_to_exec_graph(cuda_graph: Any) -> None:
    """Resolve pending scopes and rekey ``cuda_graph``'s annotations (and topology) from
    wherever they are keyed now (its capture graph, or its previous instance) to its
    current executable graph. The patched capture path does this by itself."""
    if not hasattr(cuda_graph, "raw_cuda_graph_exec"):
        raise TypeError(f"expected a torch.cuda.CUDAGraph, got {type(cuda_graph).__name__}")
    state.recorder.resolve()
    backend = state.backend()
    if backend is None:
        return
    keys: Optional[GraphKeys]
    if hasattr(cuda_graph, _KEYS_ATTR):
        keys = getattr(cuda_graph, _KEYS_ATTR)
    else:  # never captured while install()'s patches were on
        raw = _raw_graph(cuda_graph)
        if raw is None:
            raise RuntimeError(
                "this graph's capture id is unknown: capture it inside cgfast.capture.graph() "
                "or recording(), or call cgfast.capture.install() before capturing "
                "(or capture with keep_graph=True)"
            )
        keys = GraphKeys(backend.ids.graph_id(raw), raw)
        setattr(cuda_graph, _KEYS_ATTR, keys)
    if keys is None:
        return  # captured while annotations were off
    _remap(backend, cuda_graph, keys)


# -- patching -------------------------------------------------------------------------


def _wrapped(name: str, original):
    if name == "capture_begin":

        def capture_begin(self, *args, **kwargs):
            original(self, *args, **kwargs)
            state.capture_began()
            setattr(self, _COUNTED_ATTR, True)
            on_capture_begin(self)

        wrapper = capture_begin
    elif name == "capture_end":

        def capture_end(self, *args, **kwargs):
            counted = getattr(self, _COUNTED_ATTR, False)
            setattr(self, _COUNTED_ATTR, False)
            if getattr(self, _KEYS_ATTR, None) is None:
                take_over_capture(self)
            try:
                on_capture_end(self)
                original(self, *args, **kwargs)
            except BaseException:
                on_capture_failed(self)
                raise
            finally:
                if counted:
                    state.capture_over()
                else:
                    state.uncounted_capture = False
            if getattr(self, _KEYS_ATTR, None) is not None and _has_exec(self):
                on_instantiated(self)

        wrapper = capture_end
    elif name == "instantiate":

        def instantiate(self, *args, **kwargs):
            original(self, *args, **kwargs)
            on_instantiated(self)

        wrapper = instantiate
    else:
        profiler = _profiler_flag()

        # no *args: packing them would cost more than the rest (torch's replay takes none)
        def replay(self):
            if profiler._is_profiler_enabled:
                return stamped_replay(self, original)
            original(self)
            keys = getattr(self, _KEYS_ATTR, None)
            if keys is not None and keys.key_id == keys.capture_id:
                on_instantiated(self)  # instantiated inside replay

        wrapper = replay
    return functools.wraps(original)(wrapper)


def _profiler_flag() -> Any:
    """What says, in one attribute read, whether a profiler session is active:
    ``torch.autograd.profiler`` (its ``_is_profiler_enabled``, set by every profiler
    session since torch 2.1), else an object asking the profiler itself."""
    import torch.autograd.profiler as profiler

    if isinstance(getattr(profiler, "_is_profiler_enabled", None), bool):
        return profiler

    class _Asking:
        @property
        def _is_profiler_enabled(self) -> bool:
            import torch

            return bool(torch._C._autograd._profiler_enabled())

    return _Asking()


def stamp_name(exec_id: int) -> str:
    """The profiler range a recorded graph's replays run in (``cgfast annotate`` reads
    it to tell graphs of identical kernels apart)."""
    return f"cgfast.replay {exec_id}"


def stamped_replay(cuda_graph: Any, original) -> Any:
    """Replay ``cuda_graph`` inside a ``cgfast.replay <exec id>`` profiler range (only
    graphs whose annotations are recorded: their executable id is known)."""
    keys = getattr(cuda_graph, _KEYS_ATTR, None)
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


def patch_class(cls: type) -> bool:
    """Wrap ``cls``'s capture methods (idempotent). ``False`` when ``cls`` cannot capture."""
    if _ORIGINALS_ATTR not in cls.__dict__:
        if not all(hasattr(cls, name) for name in ("capture_begin", "capture_end", "raw_cuda_graph_exec")):
            return False
        originals = {}
        for name in _HOOKED_METHODS:
            if not hasattr(cls, name):
                continue
            originals[name] = cls.__dict__.get(name, _INHERITED)
            setattr(cls, name, _wrapped(name, getattr(cls, name)))
        setattr(cls, _ORIGINALS_ATTR, originals)
        state.patched_classes += 1
    _notice_a_capture_begun_earlier()
    return True


def _notice_a_capture_begun_earlier() -> None:
    """A capture already under way when recording starts (``recording()`` entered inside
    ``torch.cuda.graph``) was not counted: until it ends, scopes ask the driver."""
    if not state.enabled or state.captures_in_progress or state.uncounted_capture:
        return
    backend = state.backend()
    try:
        capturing = backend is not None and backend.streams.capturing_stream() is not None
    except Exception:  # annotation must never break the capture
        state.recorder.report_failure("asking whether the current stream captures")
        return
    state.uncounted_capture = capturing


def unpatch_class(cls: type) -> None:
    originals = cls.__dict__.get(_ORIGINALS_ATTR)
    if originals is None:
        return
    for name, original in originals.items():
        if original is _INHERITED:
            delattr(cls, name)
        else:
            setattr(cls, name, original)
    delattr(cls, _ORIGINALS_ATTR)
    state.patched_classes -= 1


def _torch_graph_class() -> Optional[type]:
    try:
        import torch
    except ImportError:
        return None
    return getattr(torch.cuda, "CUDAGraph", None)


def install() -> bool:
    """Patch ``torch.cuda.CUDAGraph`` so every capture made while annotations are enabled
    (``torch.cuda.graph``, ``make_graphed_callables``, Inductor's cudagraph trees, the
    graph wrappers of inference servers) is resolved at capture end and remapped after
    each instantiation. Idempotent; ``False`` when torch cannot capture CUDA graphs.

    While installed, the patched methods also count the captures in progress, and a
    scope opened while none is skips asking the driver whether its stream captures:
    scopes then record in captures made through ``torch.cuda.CUDAGraph`` (any of the
    above; one already under way on the current stream when recording starts is taken
    over), not in captures begun outside it (a raw ``cudaStreamBeginCapture``): for
    those, :func:`uninstall` and remap with :func:`remap_to_exec_graph`."""
    cls = _torch_graph_class()
    if cls is None or not patch_class(cls):
        return False
    from cgfast.capture import _torch_api

    _torch_api.install()  # torch's own mark_kernels, recorded where torch cannot
    return True


def uninstall() -> None:
    """Undo :func:`install` (idempotent)."""
    cls = _torch_graph_class()
    if cls is not None:
        unpatch_class(cls)
    from cgfast.capture import _torch_api

    _torch_api.uninstall()


class recording:
    """Enable annotations for the dynamic extent of the block (restoring the previous
    state after) with :func:`install`'s patches active, so every capture inside is
    recorded, resolved at capture end and remapped after instantiation. Nothing recorded
    earlier is cleared; warm-up runs outside a capture record nothing."""

    __slots__ = ("_previous", "_stack_filter_paths", "_stacks")

    def __init__(self, *, stacks: bool = False, stack_filter_paths=None) -> None:
        self._previous: List[bool] = []
        self._stacks = stacks  # also record each node's launch frames (see annotate_modules)
        self._stack_filter_paths = stack_filter_paths

    def __enter__(self) -> recording:
        self._previous.append(state.enabled)
        state.enabled = True
        state.backend()  # choose the id source now, before any capture is under way
        install()
        if self._stacks:
            from cgfast.capture import _stacks

            _stacks.request(self, self._stack_filter_paths)
        return self

    def __exit__(self, exc_type, exc, traceback) -> Literal[False]:
        state.enabled = self._previous.pop()
        if self._stacks:
            from cgfast.capture import _stacks

            _stacks.release(self)
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
