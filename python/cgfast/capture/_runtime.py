"""The one owner of what ``cgfast.capture`` keeps while a process runs.

:data:`runtime` (a :class:`CaptureRuntime`) holds the annotation switch and what holds
it on, the recorder, the backend, the captures in progress and the flags the hot paths
read, the caches of a capture (stream -> graph, the backward span), the lanes, the
``annotate_modules`` registry and its per-thread frames, the launch-stack and op-count
requests and the patches applied to torch. Every other module is functions and classes over it;
only :mod:`cgfast.capture._patches` changes torch, and only this module's methods
change the switch and the capture count (under their locks).

:func:`never_raises` is how every driver query and hook is kept from breaking the
capture it annotates: a failure is reported once (then at debug level) and that
annotation is dropped.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from types import TracebackType
from typing import Any, Callable, Dict, Hashable, List, Optional, Set, Tuple, Type, TypeVar

from cgfast.capture._backend import TorchStreams, choose_backend
from cgfast.capture._core import Recorder
from cgfast.capture._interface import Backend, StreamOps

logger = logging.getLogger("cgfast.capture")

FIRST_LANE = 60

# An annotate_modules registry entry: (its handle, forward annotation, backward annotation
# or None, whether the module is an exact nn.Identity or nn.Dropout, whose calls may
# launch nothing: see _module_calls._launches_nothing)
ModuleEntry = Tuple[Any, Dict[str, Any], Optional[Dict[str, Any]], bool]


class CaptureRuntime:
    """Everything the capture layer keeps; one instance, :data:`runtime`, per process."""

    # slots: the hot paths read several of these per module call and scope
    __slots__ = (
        "_backend",
        "_backend_chosen",
        "_backend_lock",
        "_count_lock",
        "_holds",
        "_lanes",
        "_lanes_lock",
        "_muted",
        "_next_hold",
        "_reason",
        "_streams",
        "_switch_lock",
        "_switched_on",
        "_torch_holds",
        "autograd_calls",
        "backward_scopes",
        "backward_span",
        "captures_in_progress",
        "compiled_captures",
        "count_mode",
        "count_requests",
        "enabled",
        "forward_stacks",
        "global_module_hooks",
        "installed",
        "leaf_stacks",
        "module_call_of_torch",
        "module_calls_record",
        "module_frames",
        "module_naming",
        "modules",
        "modules_lock",
        "patched_classes",
        "quiet_module_types",
        "recorder",
        "replay_window",
        "stack_filters",
        "stack_mode",
        "stack_outer_frames",
        "stack_requests",
        "stream_graphs",
        "uncounted_capture",
    )

    def __init__(self) -> None:
        # -- the annotation switch ----------------------------------------------------
        # On while enable_annotations() says so or while anything holds it on (a
        # recording() block, capture.graph, an annotate_modules handle, torch's annotated
        # capture). Read on every scope and module call: only _update_enabled writes it.
        self.enabled = False
        self._switched_on = False
        self._holds: Set[int] = set()
        # holds that were active when disable_annotations() ran: they no longer count
        self._muted: Set[int] = set()
        self._next_hold = 0
        # holds taken by torch's _set_annotations_enabled(True), released by its (False)
        self._torch_holds: List[int] = []
        self._switch_lock = threading.Lock()

        self.recorder = Recorder()

        # -- the backend: chosen once, lazily, the first time something needs it -------
        self._backend_chosen = False
        self._backend: Optional[Backend] = None
        self._reason = "not chosen yet"
        self._streams: Optional[StreamOps] = None
        self._backend_lock = threading.Lock()

        # -- captures through patched graph classes ------------------------------------
        # While a graph class is patched its captures are counted: with none in
        # progress a scope need not ask the driver whether its stream is capturing.
        self.patched_classes = 0
        self.captures_in_progress = 0
        # A capture that began before the patches (its end is still seen by them).
        self.uncounted_capture = False
        # Of the captures in progress, those of compiled code (Inductor's cudagraphs,
        # which call no module): module calls are not wrapped for them, as wrapping
        # torch's Module.__call__ after torch.compile traced it can make it recompile.
        self.compiled_captures = 0
        self._count_lock = threading.Lock()
        # stream -> (graph, graph id) of streams seen capturing into a recorded top-level
        # graph since the last capture began or ended: later spans on them ask the driver
        # only for the node count (used only while every capture is counted)
        self.stream_graphs: Dict[int, Tuple[int, int]] = {}
        # the backward span open now: (backend, SpanStart, annotation); see _backward
        self.backward_span: Optional[Tuple[Any, Any, Dict[str, Any]]] = None
        # .open: merged backward annotations of the mark_kernels(backward=True) scopes
        # open on a thread
        self.backward_scopes = threading.local()

        # -- lanes ----------------------------------------------------------------------
        self._lanes: Dict[Hashable, int] = {}
        self._lanes_lock = threading.Lock()

        # -- annotate_modules -----------------------------------------------------------
        self.modules: Dict[Any, ModuleEntry] = {}
        self.modules_lock = threading.RLock()
        # the annotate_all_modules handle, which registers the modules of models called
        # during captures as they are first called (see _all_modules), or None
        self.module_naming: Optional[Any] = None
        # whether module calls do work: a handle is active and a capture may be under way
        self.module_calls_record = False
        # .open: the annotated module calls under way on a thread, innermost last:
        # [module, graph, graph id, first local id of its open segment, its closed
        # segments as [(first, end)] or None]
        self.module_frames = threading.local()
        # bound when Module.__call__ is first wrapped (see _patches): torch's __call__
        # and torch.compiler.is_compiling; torch.is_grad_enabled and the next autograd
        # sequence number; torch's global forward (pre-)hooks; (nn.Identity, nn.Dropout)
        self.module_call_of_torch: Tuple[Callable[..., Any], Callable[[], bool]] = (_unbound, _unbound)
        self.autograd_calls: Tuple[Callable[[], Any], Callable[[], int]] = (_unbound, _unbound)
        self.global_module_hooks: Tuple[Dict[Any, Any], Dict[Any, Any]] = ({}, {})
        self.quiet_module_types: Tuple[Any, ...] = ()

        # -- launch stacks ----------------------------------------------------------------
        self.stack_requests: List[Tuple[Any, Optional[Tuple[str, ...]]]] = []  # (owner, filter paths)
        # filter paths (None: torch's defaults) -> (directory prefixes, file name -> filtered?)
        self.stack_filters: Dict[Optional[Tuple[str, ...]], Tuple[Tuple[str, ...], Dict[str, bool]]] = {}
        # id of the Python frame of a module call under way that records (``module_call``)
        # -> the user frames from it outward, as (distance from it, "file:line:function"),
        # noted at its entry: its callers' lines cannot change while it runs, so every op
        # inside walks only up to it
        self.stack_outer_frames: Dict[int, List[Tuple[int, str]]] = {}
        # autograd sequence number -> the frames of the forward op that made the node,
        # for the backward nodes' launch frames; kept while stacks are asked for
        self.forward_stacks: Dict[int, Tuple[str, ...]] = {}
        # leaf tensor -> (the capture's stack recorder, the frames of the first op that
        # used it in that capture): its AccumulateGrad node's, which has no sequence number
        self.leaf_stacks: Any = {}  # a torch.utils.weak.WeakIdKeyDictionary once used

        # -- replays ------------------------------------------------------------------------
        # told of every replay through a patched graph class, before and after it
        # (``before_replay()``, ``after_replay()``): cgfast run --profile's window, or None
        self.replay_window: Optional[Any] = None

        # -- op counts (FLOPs and bytes) ----------------------------------------------------
        self.count_requests: List[Any] = []  # owners

        # -- patches (applied and undone by _patches alone) ------------------------------
        # every _patches.Patch applied to torch, in order; the dispatch mode recording
        # launch stacks while it is pushed
        self.installed: List[Any] = []
        self.stack_mode: Optional[Any] = None
        # the dispatch mode recording op counts while it is pushed
        self.count_mode: Optional[Any] = None

    # -- the annotation switch ------------------------------------------------------------

    def switch_on(self) -> None:
        """``enable_annotations()``: on from now on."""
        with self._switch_lock:
            self._switched_on = True
            self._update_enabled()

    def switch_off(self) -> None:
        """``disable_annotations()``: off now, also for what holds it on now (until a new
        hold or ``switch_on``)."""
        with self._switch_lock:
            self._switched_on = False
            self._muted = set(self._holds)
            self._update_enabled()

    def hold(self) -> int:
        """Keep annotations on until :meth:`release` of the returned token."""
        with self._switch_lock:
            token = self._next_hold
            self._next_hold += 1
            self._holds.add(token)
            self._update_enabled()
        return token

    def release(self, token: int) -> None:
        with self._switch_lock:
            self._holds.discard(token)
            self._muted.discard(token)
            self._update_enabled()

    def hold_for_torch(self) -> None:
        """torch's ``_set_annotations_enabled(True)``: on for its annotated capture."""
        self._torch_holds.append(self.hold())

    def release_for_torch(self) -> None:
        """torch's ``_set_annotations_enabled(False)``: what the last ``hold_for_torch`` held."""
        if self._torch_holds:
            self.release(self._torch_holds.pop())

    @property
    def holders(self) -> int:
        """How many holds keep annotations on now."""
        return len(self._holds) - len(self._muted)

    def _update_enabled(self) -> None:
        self.enabled = self._switched_on or len(self._holds) > len(self._muted)

    # -- the backend --------------------------------------------------------------------

    def backend(self) -> Optional[Backend]:
        """The backend in use, choosing it on first call; ``None`` when there is none."""
        if self._backend_chosen:
            return self._backend
        with self._backend_lock:
            if not self._backend_chosen:
                backend, reason = choose_backend()
                self._backend, self._reason, self._backend_chosen = backend, reason, True
                if backend is None:
                    logger.warning("cgfast.capture: annotations cannot be recorded: %s", reason)
                else:
                    logger.info("cgfast.capture: graph node ids from %s", backend.description)
        return self._backend

    @property
    def backend_chosen(self) -> bool:
        return self._backend_chosen

    def describe(self) -> str:
        backend = self.backend()
        return backend.description if backend is not None else f"none: {self._reason}"

    def streams(self) -> StreamOps:
        """The backend's stream operations; torch's while none is chosen and annotations
        are off (switching streams and naming lanes need no id source)."""
        if self._backend_chosen or self.enabled:
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
        with self._backend_lock:
            self._backend = backend
            self._reason = reason or "no backend was given"
            self._streams = streams
            self._backend_chosen = True

    def forget_backend(self) -> None:
        """Choose again on next use."""
        with self._backend_lock:
            self._backend, self._streams, self._backend_chosen = None, None, False
            self._reason = "not chosen yet"

    def reset(self) -> None:
        """Annotations off with nothing holding them on, a new recorder, the backend
        chosen again on next use (tests). Patches and handles are left as they are."""
        with self._switch_lock:
            self._switched_on = False
            self._holds.clear()
            self._muted.clear()
            self._torch_holds.clear()
            self._update_enabled()
        self.recorder = Recorder()
        self.forget_backend()

    # -- captures through patched classes -----------------------------------------------

    def class_patched(self) -> None:
        with self._count_lock:
            self.patched_classes += 1
            self._update_module_calls_record()

    def class_unpatched(self) -> None:
        with self._count_lock:
            self.patched_classes -= 1
            self._update_module_calls_record()

    def capture_began(self) -> None:
        with self._count_lock:
            self.captures_in_progress += 1
            self._capture_changed()

    def capture_over(self, counted: bool) -> None:
        """A capture through a patched class ended (``counted``: its begin was seen too)."""
        with self._count_lock:
            if counted:
                self.captures_in_progress = max(0, self.captures_in_progress - 1)
            else:
                self.uncounted_capture = False
            self._capture_changed()

    def notice_uncounted_capture(self) -> None:
        """A capture under way now began before the patches: until it ends, scopes ask
        the driver."""
        with self._count_lock:
            self.uncounted_capture = True
            self._update_module_calls_record()

    def no_capture_in_progress(self) -> bool:
        """True only when every capture goes through a patched class and none is open."""
        return self.patched_classes > 0 and self.captures_in_progress == 0 and not self.uncounted_capture

    def _capture_changed(self) -> None:
        """A capture began or ended: a stream's graph, a graph handle's id and the graph
        of an open span may change (a handle may be reused by a new graph)."""
        self.stream_graphs.clear()
        self.recorder.forget_graph_ids()
        self.backward_span = None
        frames = getattr(self.module_frames, "open", None)
        if frames:
            frames.clear()
        self._update_module_calls_record()

    def _update_module_calls_record(self) -> None:
        self.module_calls_record = (bool(self.modules) or self.module_naming is not None) and (
            self.captures_in_progress > 0 or self.uncounted_capture or self.patched_classes == 0
        )

    # -- annotate_modules ---------------------------------------------------------------

    def add_modules(self, entries: Dict[Any, ModuleEntry], *, during_call: bool = False) -> None:
        """Register ``entries`` (module -> entry); ``ValueError`` naming the first module
        another active handle annotates, registering nothing. ``during_call``: from
        inside a module call, whose open frames stay as they are."""
        with self.modules_lock:
            for module in entries:
                owner = self.modules.get(module)
                if owner is not None and not getattr(owner[0], "yields_to_handles", False):
                    name = owner[1][owner[0].key]
                    raise ValueError(
                        f"annotate_modules: module {name!r} ({type(module).__name__}) is already "
                        "annotated by another active handle; remove() that one first"
                    )
            self.modules.update(entries)
            if during_call:
                with self._count_lock:
                    self._update_module_calls_record()
            else:
                self._modules_changed()

    def set_module_naming(self, handle: Optional[Any]) -> None:
        """The ``annotate_all_modules`` handle from now on (``None``: none)."""
        with self.modules_lock:
            self.module_naming = handle
            self._modules_changed()

    def remove_modules(self, handle: Any, modules: List[Any]) -> None:
        with self.modules_lock:
            for module in modules:
                if self.modules.get(module, (None,))[0] is handle:
                    del self.modules[module]
            self._modules_changed()

    def _modules_changed(self) -> None:
        frames = getattr(self.module_frames, "open", None)
        if frames:
            frames.clear()
        with self._count_lock:
            self._update_module_calls_record()

    # -- launch stacks ------------------------------------------------------------------

    def request_stacks(self, owner: Any, filter_paths: Optional[Tuple[str, ...]]) -> None:
        """Record stacks while ``owner`` holds a request (the latest request's filter wins)."""
        self.stack_requests.append((owner, filter_paths))
        self.stack_outer_frames.clear()  # noted under the filter this request may replace

    def release_stacks(self, owner: Any) -> None:
        for index, (holder, _) in enumerate(self.stack_requests):
            if holder is owner:
                del self.stack_requests[index]
                break
        self.stack_outer_frames.clear()
        if not self.stack_requests:
            self.forward_stacks = {}
            self.leaf_stacks = {}

    def wants_stack_mode(self) -> bool:
        return bool(self.stack_requests) and self.captures_in_progress > 0

    # -- op counts --------------------------------------------------------------------------

    def request_counts(self, owner: Any) -> None:
        """Record op counts while ``owner`` holds a request."""
        self.count_requests.append(owner)

    def release_counts(self, owner: Any) -> None:
        for index, holder in enumerate(self.count_requests):
            if holder is owner:
                del self.count_requests[index]
                break

    def wants_count_mode(self) -> bool:
        return bool(self.count_requests) and self.captures_in_progress > 0

    # -- lanes ----------------------------------------------------------------------------

    def lane(self, key: Hashable) -> int:
        """A small stable lane id (from ``FIRST_LANE`` up) for ``key``."""
        lane = self._lanes.get(key)
        if lane is None:
            with self._lanes_lock:
                lane = self._lanes.setdefault(key, FIRST_LANE + len(self._lanes))
        return lane


def _unbound(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("cgfast.capture: torch.nn.Module.__call__ was never wrapped")


runtime = CaptureRuntime()


Function = TypeVar("Function", bound=Callable[..., Any])


class never_raises:
    """Annotation must never break the capture it annotates. As a decorator, the function
    returns ``default`` instead of raising; as a context manager, the block ends early
    (``failed`` says so). Either way the failure is reported once, with its traceback,
    naming ``what`` failed (later ones at debug level), and that annotation is dropped."""

    __slots__ = ("default", "failed", "what")

    def __init__(self, what: str, default: Any = None) -> None:
        self.what = what
        self.default = default
        self.failed = False

    def __call__(self, function: Function) -> Function:
        what, default = self.what, self.default
        # Module boundaries and scopes call these during every capture: a wrapper of the
        # function's own arity is called inline by the interpreter, where one taking
        # *args costs about three times as much.
        code = getattr(function, "__code__", None)
        arity = None
        if (
            code is not None
            and not code.co_flags & (inspect.CO_VARARGS | inspect.CO_VARKEYWORDS)
            and not code.co_kwonlyargcount
            and not getattr(function, "__defaults__", None)
        ):
            arity = code.co_argcount

        def failed() -> Any:
            runtime.recorder.report_failure(what)
            return default

        guarded: Callable[..., Any]
        if arity == 1:

            def guarded(a: Any) -> Any:
                try:
                    return function(a)
                except Exception:
                    return failed()

        elif arity == 2:

            def guarded(a: Any, b: Any) -> Any:
                try:
                    return function(a, b)
                except Exception:
                    return failed()

        elif arity == 3:

            def guarded(a: Any, b: Any, c: Any) -> Any:
                try:
                    return function(a, b, c)
                except Exception:
                    return failed()

        else:

            def guarded(*args: Any) -> Any:
                try:
                    return function(*args)
                except Exception:
                    return failed()

        return functools.wraps(function)(guarded)  # type: ignore[return-value]

    def __enter__(self) -> never_raises:
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool:
        if exc_type is None or not issubclass(exc_type, Exception):
            return False
        self.failed = True
        runtime.recorder.report_failure(self.what, (exc_type, exc, traceback))
        return True
