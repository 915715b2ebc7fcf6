"""``cgfast run --profile``: the profiler over a window of graph replays in each process.

The replays of every ``torch.cuda.CUDAGraph`` are counted (the capture layer's replay
patch tells the window, ``runtime.replay_window``); the profiler starts before
replay ``skip + 1`` and stops after replay ``skip + replays`` (or the first after it on
the thread that started the profiler), and the trace goes into
the run's directory as ``{rank:06d}.{host}_{pid}.{ns}.pt.trace.json.gz`` (exported
through the profiler, so the process's annotation file lists it). A window cut short
(the program ends or is interrupted first) is exported at exit with what it holds. A
program that runs a profiler of its own while the window would open keeps it: the
window is dropped, with one line saying so.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

from cgfast.run._settings import ProfileWindow


class ReplayWindow:
    """The window of one process (see the module's doc)."""

    def __init__(self, recording: Any, window: ProfileWindow) -> None:
        self.recording = recording
        self.skip = window.skip
        self.replays = window.replays
        self.seen = 0
        self.profiler: Any = None
        self._lock = threading.RLock()
        self._on_sigterm: Any = None  # the SIGTERM handler put in while the window is open
        self._opened_on: Any = None  # the thread that started the profiler

    def install(self) -> None:
        """Be told of every graph replay (through the capture layer's patches) until the
        window is over."""
        from cgfast import capture

        capture.install()
        _runtime().replay_window = self

    def _close(self) -> None:
        """Be told of no more replays."""
        runtime = _runtime()
        if runtime.replay_window is self:
            runtime.replay_window = None

    def before_replay(self) -> None:
        with self._lock:
            self.seen += 1
            if self.seen == self.skip + 1 and self.profiler is None:
                self._open()

    def after_replay(self) -> None:
        with self._lock:
            if self.profiler is None or self.seen < self.skip + self.replays:
                return
            # the profiler stops on the thread that started it (a backward graph replays
            # on autograd's thread): there, at its first replay from here on
            if threading.current_thread() is self._opened_on:
                self.finish()

    def _open(self) -> None:
        import torch

        if torch.autograd.profiler._is_profiler_enabled:
            print(
                "cgfast run: the program runs a profiler of its own: --profile leaves it be "
                f"(process {os.getpid()})",
                file=sys.stderr,
            )
            self._close()
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(activities=activities)
        self.profiler.start()
        self._opened_on = threading.current_thread()
        self._on_sigterm = _finish_on_sigterm(self)

    def finish(self) -> None:
        """Stop the profiler and export what it holds (idempotent)."""
        with self._lock:
            profiler, self.profiler = self.profiler, None
            self._close()
            if profiler is None:
                return
            if self._on_sigterm is not None and signal.getsignal(signal.SIGTERM) is self._on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()
            profiler.stop()
            from cgfast.profiler import default_worker_name
            from cgfast.run._process import process_rank

            name = f"{default_worker_name(process_rank())}.{time.time_ns()}.pt.trace.json.gz"
            profiler.export_chrome_trace(os.path.join(self.recording.settings.out, name))

    def forget(self) -> None:
        """A forked child counts its own replays (the parent's profiler is not its own)."""
        self._lock = threading.RLock()
        self.seen = 0
        self.profiler = None
        _runtime().replay_window = self


def _runtime() -> Any:
    from cgfast.capture._runtime import runtime

    return runtime


def _finish_on_sigterm(window: ReplayWindow) -> Any:
    """SIGTERM ends a process without its exit handlers: while the window is open, one
    that the program left to the default exports the window first, then ends it so.
    The handler put in, or ``None``."""
    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None

    def export_then_end(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            window.finish()
            window.recording.save()
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, export_then_end)
    return export_then_end
