"""Launch stacks: the user Python frames that launched each graph node.

While something asks for stacks (``annotate_modules(..., stacks=True)``,
``recording(stacks=True)``) and a capture through ``torch.cuda.CUDAGraph`` is under way,
a dispatch mode sees every aten op the capturing thread runs (and the autograd threads
it starts): the nodes the op added to the capture (a span of local ids, as for module
scopes) get the op's Python stack, innermost first, without the frames of torch,
cuda-bindings, CUPTI, triton, importlib, Inductor's generated code and cgfast itself
(torch 2.15's filter) or, when given, of the directories in ``filter_paths``.

Backward nodes get the stack of the forward op whose gradient they compute: autograd
makes an op's node just before the op reaches the dispatch mode, so the autograd
sequence numbers taken since the previous op on the thread are the nodes this op made,
and their frames are kept by number (``runtime.forward_stacks``); an AccumulateGrad node
(no number) takes those of the first op of the capture that used its leaf, as anomaly
mode has it. An op run while the autograd engine executes a node
(``torch._C._current_autograd_node()``) takes that node's forward frames, as
:class:`BackwardFrames`; one of a node made before stacks were asked for takes none.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
import threading
from types import FrameType
from typing import Any, Dict, List, Optional, Sequence, Tuple

from cgfast.capture._core import BackwardFrames, Span
from cgfast.capture._runtime import never_raises, runtime
from cgfast.capture._spans import begin_span

MAX_FRAMES = 64
SCANNED_FRAMES = 256
_OWN_ROOT = os.path.normcase(os.path.dirname(os.path.abspath(__file__))) + os.sep


def filter_paths(paths: Optional[Sequence[str]]) -> Optional[Tuple[str, ...]]:
    """``stack_filter_paths`` as a request keeps it; ``TypeError`` for anything but a
    list of non-empty path strings."""
    if paths is None:
        return None
    if isinstance(paths, str) or not all(isinstance(p, str) and p for p in paths):
        raise TypeError("stack filter paths must be a list of non-empty path strings")
    return tuple(paths)


def _filter() -> Tuple[Tuple[str, ...], Dict[str, bool]]:
    requests = runtime.stack_requests
    paths = requests[-1][1] if requests else None
    cached = runtime.stack_filters.get(paths)
    if cached is None:
        cached = runtime.stack_filters[paths] = (_filter_roots(paths), {})
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
    """``file:line:function`` of the caller's user frames, innermost first: at most
    ``MAX_FRAMES`` of its ``SCANNED_FRAMES`` innermost frames. The walk stops at the
    frame of a recording module call (``enter_module_call``), whose outer frames are known."""
    roots, noise_of = _filter()
    outer_frames = runtime.stack_outer_frames
    frames: List[str] = []
    frame: Optional[FrameType] = sys._getframe(skip)
    try:
        for index in range(SCANNED_FRAMES):
            if frame is None or len(frames) == MAX_FRAMES:
                break
            code = frame.f_code
            filename = code.co_filename
            noise = noise_of.get(filename)
            if noise is None:
                noise = noise_of[filename] = _is_noise(filename, roots)
            if not noise:
                frames.append(f"{filename}:{frame.f_lineno}:{code.co_name}")
            elif outer_frames:
                outer = outer_frames.get(id(frame))
                if outer is not None:
                    _extend(frames, outer, index)
                    break
            frame = frame.f_back
    finally:
        del frame
    return tuple(frames)


def enter_module_call(call_frame: FrameType) -> int:
    """Note the user frames outside ``call_frame``, a module call that records, for the
    walks of the ops inside it (the lines of its callers cannot change while it runs);
    returns the key to give ``exit_module_call``."""
    # user_frames' walk, keeping distances: one walk shared by both (a generator, or
    # pairs stripped per op) cost stacks=True about 10% an op, side by side
    roots, noise_of = _filter()
    outer_frames = runtime.stack_outer_frames
    outer: List[Tuple[int, str]] = []
    frame: Optional[FrameType] = call_frame.f_back
    try:
        for distance in range(1, SCANNED_FRAMES):
            if frame is None or len(outer) == MAX_FRAMES:
                break
            code = frame.f_code
            filename = code.co_filename
            noise = noise_of.get(filename)
            if noise is None:
                noise = noise_of[filename] = _is_noise(filename, roots)
            if not noise:
                outer.append((distance, f"{filename}:{frame.f_lineno}:{code.co_name}"))
            elif outer_frames:
                enclosing = outer_frames.get(id(frame))
                if enclosing is not None:
                    for further, line in enclosing:
                        if distance + further >= SCANNED_FRAMES or len(outer) == MAX_FRAMES:
                            break
                        outer.append((distance + further, line))
                    break
            frame = frame.f_back
    finally:
        del frame
    key = id(call_frame)
    outer_frames[key] = outer
    return key


def exit_module_call(key: int) -> None:
    runtime.stack_outer_frames.pop(key, None)


def _extend(frames: List[str], outer: List[Tuple[int, str]], index: int) -> None:
    """``frames`` (of the walk's first ``index`` frames) and the ``outer`` user frames of
    the module call found at ``index``, as one walk over every frame would have them."""
    for distance, line in outer:
        if index + distance >= SCANNED_FRAMES or len(frames) == MAX_FRAMES:
            break
        frames.append(line)


def _is_noise(filename: str, roots: Tuple[str, ...]) -> bool:
    path = filename if filename.startswith("<") else os.path.normcase(os.path.abspath(filename))
    return path.startswith(roots)


_begin_op = never_raises("reading the capture graph at an op")(begin_span)


@never_raises("reading the capture graph after an op")
def _node_count_after_op(backend: Any, graph: int) -> int:
    return backend.graphs.node_count(graph)


def _no_node() -> None:
    return None


@functools.cache
def launch_stacks_mode() -> type:
    """The dispatch mode that records launch stacks (a class made once: it subclasses
    torch's ``TorchDispatchMode``)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.weak import WeakIdKeyDictionary

    class LaunchStacks(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.sequence_nr = torch._C._autograd._get_sequence_nr
            self.current_node = getattr(torch._C, "_current_autograd_node", _no_node)
            # per thread: the sequence number seen at its previous op; the pushing
            # thread (the capture's) from now, the autograd engine's from their first op
            self.seen = threading.local()
            self.seen.number = self.sequence_nr()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            backend = runtime.backend() if runtime.enabled else None
            start = _begin_op(backend) if backend is not None else None
            node = self.current_node()
            made = None
            if node is None:
                number = self.sequence_nr()
                seen = getattr(self.seen, "number", number)
                if number != seen:
                    made = range(seen, number)
                self.seen.number = number
            out = func(*args, **(kwargs or {}))
            frames = None
            if made:
                frames = user_frames(2)
                if frames:
                    forward_stacks = runtime.forward_stacks
                    for number in made:
                        forward_stacks[number] = frames
                    self._note_leaves(args, frames)
            if start is not None:
                end = _node_count_after_op(backend, start.graph)
                if end is not None and end > start.first:
                    if node is not None:
                        forward = self._forward_frames(node)
                        frames = BackwardFrames(forward) if forward else None
                    elif frames is None:
                        frames = user_frames(2)
                    if frames:
                        runtime.recorder.add_stack(Span(start.graph_id, start.first, end), frames)
            return out

        def _note_leaves(self, args: Any, frames: Tuple[str, ...]) -> None:
            leaf_stacks = runtime.leaf_stacks
            if type(leaf_stacks) is dict:
                leaf_stacks = runtime.leaf_stacks = WeakIdKeyDictionary()
            for arg in args:
                for tensor in arg if isinstance(arg, (list, tuple)) else (arg,):
                    if isinstance(tensor, torch.Tensor) and tensor.requires_grad and tensor.grad_fn is None:
                        noted = leaf_stacks.get(tensor)
                        if noted is None or noted[0] is not self:
                            leaf_stacks[tensor] = (self, frames)

        def _forward_frames(self, node: Any) -> Optional[Tuple[str, ...]]:
            if isinstance(node, accumulate_grad):
                noted = runtime.leaf_stacks.get(node.variable)
                return noted[1] if noted is not None else None
            return runtime.forward_stacks.get(node._sequence_nr())

    accumulate_grad = torch._C._functions.AccumulateGrad
    return LaunchStacks
