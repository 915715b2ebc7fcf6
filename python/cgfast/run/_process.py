"""One process of a program under ``cgfast run``: what it turns on, and the annotation
file it keeps in the run's directory.

:func:`start` (called by the start-up hook) makes the process's :class:`ProcessRecording`
and waits for torch. Its annotation file, ``kernel_annotations_rank{R}_{pid}.json``, is
written whole (atomically) each time the program's profiler exports a trace, and at
exit, listing the traces the process exported, once the process has captured
something. A failure in here prints one warning line; the program runs on unannotated.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import threading
from typing import Any, List, Optional, Set

from cgfast.run._imports import AfterImport
from cgfast.run._settings import RunSettings

WARNING = "cgfast run: warning:"
NOT_SAVED = "its annotations are not saved"


_warned: Set[str] = set()


def warn(what: str, exc: BaseException, consequence: str = "this process runs on unannotated") -> None:
    """One line on stderr for a failure of cgfast's own (once for each ``consequence``)."""
    if consequence in _warned:
        return
    _warned.add(consequence)
    print(f"{WARNING} {what} failed ({type(exc).__name__}: {exc}); {consequence}", file=sys.stderr)


def process_rank() -> int:
    """The ``torch.distributed`` rank, else the launcher's ``RANK``, else 0."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


class ProcessRecording:
    """What ``cgfast run`` keeps in one process: its settings, the traces it exported and
    where its annotation file goes (named at the first save: its rank and pid)."""

    def __init__(self, settings: RunSettings) -> None:
        self.settings = settings
        self.traces: List[str] = []
        self.annotation_file: Optional[str] = None
        self.window: Any = None  # the --profile window, once torch is imported
        self._lock = threading.RLock()
        self._naming: Any = None
        self._recording: Any = None
        # whether the capture layer is in use: from the first capture on (--profile: from
        # torch's import)
        self.capture_layer = False

    # -- set-up, as the program imports what it needs -------------------------------------

    def on_torch(self, torch: Any) -> None:
        """torch is imported: save at each export, and record from the first capture on
        (the capture layer is not imported before: a program that never captures does
        not pay for it)."""
        try:
            _patch_trace_exports(self)
            if self.settings.profile is not None:
                from cgfast.run._profile_window import ReplayWindow

                self._record_captures()
                self.window = ReplayWindow(self, self.settings.profile)
                self.window.install()
            elif self.settings.record:
                _before_first_capture(torch, self._record_captures)
        except Exception as exc:
            warn("setting up recording", exc)

    def _record_captures(self) -> None:
        from cgfast import capture

        self.capture_layer = True
        if not self.settings.record:
            return
        stacks, flops = self.settings.stacks, self.settings.flops
        if self.settings.modules:
            self._naming = capture.annotate_all_modules(stacks=stacks, flops=flops)
        elif stacks or flops:
            self._recording = capture.recording(stacks=stacks, flops=flops)
            self._recording.__enter__()
        capture.enable_annotations(choose_backend=False)

    def on_inductor(self, module: Any) -> None:
        """Inductor is imported: its toggle goes on (``CGFAST_INDUCTOR_ANNOTATIONS``, set
        by ``cgfast run``, is the toggle's default)."""
        try:
            import cgfast.inductor  # noqa: F401
        except Exception as exc:
            warn("turning the Inductor toggle on", exc)

    # -- saving -----------------------------------------------------------------------------

    def trace_exported(self, path: Any) -> None:
        """The program's profiler wrote a trace to ``path``: list it and save."""
        try:
            with self._lock:
                self.traces.append(os.path.abspath(os.fspath(path)))
                self.save()
        except Exception as exc:
            warn(f"saving the annotations of {path}", exc, NOT_SAVED)

    def save(self) -> Optional[str]:
        """Write the annotation file (whole, atomically) if this process captured
        anything; its path, or ``None``."""
        if not self.capture_layer:
            return None
        from cgfast.capture._runtime import runtime

        with self._lock:
            recorder = runtime.recorder
            recorder.resolve()
            if not recorder.annotations and not recorder.topology():
                return None
            if self.annotation_file is None:
                name = f"kernel_annotations_rank{process_rank()}_{os.getpid()}.json"
                self.annotation_file = os.path.join(self.settings.out, name)
            from cgfast import capture

            capture.save_annotations(self.annotation_file, traces=self.traces)
            return self.annotation_file

    def at_exit(self) -> None:
        try:
            if self.window is not None:
                self.window.finish()
            if "torch" in sys.modules:
                self.save()
        except Exception as exc:
            warn("saving the annotations at exit", exc, NOT_SAVED)

    def after_fork_in_child(self) -> None:
        """A forked child: what the parent recorded is not its own."""
        with self._lock:
            self.traces = []
            self.annotation_file = None
        if self.window is not None:
            self.window.forget()
        if self.capture_layer:
            from cgfast import capture

            capture.clear_kernel_annotations()
        _finish_forked_child_at_exit(self)


def _before_first_capture(torch: Any, start: Any) -> None:
    """Call ``start()`` when the program first begins a capture through
    ``torch.cuda.CUDAGraph`` (``torch.cuda.graph``, ``make_graphed_callables``,
    Inductor's cudagraph trees), before the capture begins; torch's ``capture_begin`` is
    put back first, so what ``start`` patches wraps torch's own."""
    graph_class: Any = getattr(torch.cuda, "CUDAGraph", None)
    original = getattr(graph_class, "__dict__", {}).get("capture_begin")
    if original is None:
        return
    lock = threading.Lock()

    def capture_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        with lock:
            if graph_class.__dict__.get("capture_begin") is capture_begin:
                graph_class.capture_begin = original
                try:
                    start()
                except Exception as exc:
                    warn("setting up recording", exc)
        return graph_class.capture_begin(self, *args, **kwargs)

    graph_class.capture_begin = capture_begin


def _finish_forked_child_at_exit(recording: ProcessRecording) -> None:
    """multiprocessing's fork children end in ``os._exit``, past ``atexit``: their exit
    finalizers run instead."""
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        util.Finalize(None, recording.at_exit, exitpriority=100)


_exporting = threading.local()


def _patch_trace_exports(recording: ProcessRecording) -> None:
    """Each trace the profiler exports (``torch.profiler.profile`` and the autograd
    profiler, ``tensorboard_trace_handler`` among their callers) is saved with."""
    import torch.autograd.profiler as autograd_profiler
    import torch.profiler.profiler as profiler

    for owner in (profiler._KinetoProfile, autograd_profiler.profile):
        original = owner.__dict__.get("export_chrome_trace")
        if original is not None and not getattr(original, "_cgfast_run", False):
            owner.export_chrome_trace = _exporting_trace(original, recording)  # type: ignore[method-assign]


def _exporting_trace(original: Any, recording: ProcessRecording) -> Any:
    @functools.wraps(original)
    def export_chrome_trace(self: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_exporting, "depth", 0)
        _exporting.depth = depth + 1
        try:
            result = original(self, path, *args, **kwargs)
        finally:
            _exporting.depth = depth
        if depth == 0:  # the kineto profile exports through the autograd one
            recording.trace_exported(path)
        return result

    export_chrome_trace._cgfast_run = True  # type: ignore[attr-defined]
    return export_chrome_trace


def start() -> Optional[ProcessRecording]:
    """Start this process's recording if ``cgfast run`` started it (``CGFAST_RUN``)."""
    settings = RunSettings.from_env()
    if settings is None:
        return None
    recording = ProcessRecording(settings)
    hooks = AfterImport()
    hooks.when_imported("torch", recording.on_torch)
    if settings.record and settings.inductor:
        hooks.when_imported("torch._inductor.compile_fx", recording.on_inductor)
    atexit.register(recording.at_exit)
    os.register_at_fork(after_in_child=recording.after_fork_in_child)
    return recording
