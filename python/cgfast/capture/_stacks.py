"""Launch stacks: the user Python frames that launched each graph node.

While something asks for stacks (``annotate_modules(..., stacks=True)``,
``recording(stacks=True)``) and a capture through ``torch.cuda.CUDAGraph`` is under way,
a dispatch mode sees every aten op the capturing thread runs (and the autograd threads
it starts): the nodes the op added to the capture (a span of local ids, as for module
scopes) get the op's Python stack, innermost first, without the frames of torch,
cuda-bindings, CUPTI, triton, importlib, Inductor's generated code and cgfast itself
(torch 2.15's filter) or, when given, of the directories in ``filter_paths``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from types import FrameType
from typing import Any, Dict, List, Optional, Sequence, Tuple

from cgfast.capture._core import Span
from cgfast.capture._state import state

MAX_FRAMES = 64
_requests: List[Tuple[Any, Optional[Tuple[str, ...]]]] = []  # (owner, filter paths)
_mode: List[Any] = []  # the dispatch mode while pushed
# filter paths (None: torch's defaults) -> (directory prefixes, file name -> filtered?)
_filters: Dict[Optional[Tuple[str, ...]], Tuple[Tuple[str, ...], Dict[str, bool]]] = {}
_OWN_ROOT = os.path.normcase(os.path.dirname(os.path.abspath(__file__))) + os.sep


def request(owner: Any, filter_paths: Optional[Sequence[str]] = None) -> None:
    """Record stacks while ``owner`` holds a request (the latest request's filter wins)."""
    if filter_paths is not None:
        if isinstance(filter_paths, str) or not all(isinstance(p, str) and p for p in filter_paths):
            raise TypeError("stack filter paths must be a list of non-empty path strings")
        filter_paths = tuple(filter_paths)
    _requests.append((owner, filter_paths))
    if _sync not in state.capture_listeners:
        state.capture_listeners.append(_sync)
    _sync()


def release(owner: Any) -> None:
    for index, (holder, _) in enumerate(_requests):
        if holder is owner:
            del _requests[index]
            break
    _sync()


def _sync() -> None:
    """Push the dispatch mode when a capture begins (stacks asked for), pop it when the
    last capture ends."""
    want = bool(_requests) and state.captures_in_progress > 0
    if want and not _mode:
        from torch.utils._python_dispatch import _push_mode

        mode = _LaunchStacks()
        _push_mode(mode)
        _mode.append(mode)
    elif _mode and not want:
        from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode

        if _get_current_dispatch_mode() is _mode[0]:
            _pop_mode()
        _mode.clear()


def _filter() -> Tuple[Tuple[str, ...], Dict[str, bool]]:
    paths = _requests[-1][1] if _requests else None
    cached = _filters.get(paths)
    if cached is None:
        cached = _filters[paths] = (_filter_roots(paths), {})
    return cached


def _filter_roots(paths: Optional[Tuple[str, ...]]) -> Tuple[str, ...]:
    if paths is None:
        roots = []
        try:
            from torch._inductor.runtime.cache_dir_utils import default_cache_dir

            roots.append(default_cache_dir())
        except Exception:  # private to Inductor and moved between versions: a filter hint only
            pass
        if os.environ.get("TORCHINDUCTOR_CACHE_DIR"):
            roots.append(os.environ["TORCHINDUCTOR_CACHE_DIR"])
        for name in ("torch", "cuda.bindings", "cupti", "triton", "importlib"):
            module = sys.modules.get(name)
            if module is not None and getattr(module, "__path__", None):
                roots.extend(module.__path__)
                continue
            try:
                spec = importlib.util.find_spec(name)
            except (ImportError, ValueError):
                continue
            if spec is not None:
                roots.extend(spec.submodule_search_locations or ())
    else:
        roots = list(paths)
    prefixes = tuple(os.path.normcase(os.path.abspath(root)).rstrip(os.sep) + os.sep for root in roots)
    return prefixes + (_OWN_ROOT,) + (("<frozen ",) if paths is None else ())


def user_frames(skip: int = 1) -> Tuple[str, ...]:
    """``file:line:function`` of the caller's user frames, innermost first."""
    roots, noise_of = _filter()
    frames: List[str] = []
    frame: Optional[FrameType] = sys._getframe(skip)
    try:
        for _ in range(256):
            if frame is None or len(frames) == MAX_FRAMES:
                break
            code = frame.f_code
            filename = code.co_filename
            noise = noise_of.get(filename)
            if noise is None:
                path = filename if filename.startswith("<") else os.path.normcase(os.path.abspath(filename))
                noise = noise_of[filename] = path.startswith(roots)
            if not noise:
                frames.append(f"{filename}:{frame.f_lineno}:{code.co_name}")
            frame = frame.f_back
    finally:
        del frame
    return tuple(frames)


def _make_mode_class():
    from torch.utils._python_dispatch import TorchDispatchMode

    class LaunchStacks(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            start = None
            backend = state.backend() if state.enabled else None
            if backend is not None:
                from cgfast.capture._spans import begin_span

                try:
                    start = begin_span(backend)
                except Exception:  # annotation must never break the capture
                    state.recorder.report_failure("reading the capture graph at an op")
            out = func(*args, **(kwargs or {}))
            if start is not None:
                try:
                    end = backend.graphs.node_count(start.graph)
                except Exception:  # annotation must never break the capture
                    state.recorder.report_failure("reading the capture graph after an op")
                    return out
                if end > start.first:
                    frames = user_frames(2)
                    if frames:
                        state.recorder.add_stack(Span(start.graph_id, start.first, end), frames)
            return out

    return LaunchStacks


_mode_class: List[Any] = []


def _LaunchStacks():
    if not _mode_class:
        _mode_class.append(_make_mode_class())
    return _mode_class[0]()
