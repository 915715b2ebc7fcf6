"""What ``torch.nn.Module.__call__`` does while an ``annotate_modules`` handle is active.

One wrapper serves every handle, doing what a pair of global forward hooks would
without sending every module call down torch's slower path. Outside captures through
``torch.cuda.CUDAGraph`` it checks a flag (``runtime.module_calls_record``), and during
them a module of no active handle costs a dict lookup. Module scopes are spans
(``_spans``); the backward of what a module's forward made is claimed for it in its
forward hook (``_backward``).

A module's nodes are recorded as segments that leave out its children's: from its
entry (or a child's exit) to a child's entry (or its own exit). Every node is then in
one module span, the innermost, so resolving costs one entry per node however deep the
module tree is, and the node counts read at each boundary serve both sides of it.
A module's segments are recorded when it exits, after what exited inside it (its
children, user scopes), so that those still win on common keys.
"""

from __future__ import annotations

import sys
from typing import Any, List, Optional, Tuple

from cgfast.capture._backward import claim_backward
from cgfast.capture._runtime import never_raises, runtime
from cgfast.capture._spans import begin_span
from cgfast.capture._stacks import enter_module_call, exit_module_call


def open_frames() -> List[list]:
    """The annotated module calls under way on this thread (``runtime.module_frames``)."""
    frames = getattr(runtime.module_frames, "open", None)
    if frames is None:
        frames = runtime.module_frames.open = []
    return frames


@never_raises("reading the capture graph at a module's forward")
def _position(backend) -> Optional[Tuple[int, int, int]]:
    """``(graph, graph id, node count)`` of the current stream's capture, or ``None``."""
    if not runtime.uncounted_capture and runtime.patched_classes:
        known = runtime.stream_graphs.get(backend.streams.current_stream())
        if known is not None:
            return known[0], known[1], backend.graphs.node_count(known[0])
    start = begin_span(backend)
    return None if start is None else (start.graph, start.graph_id, start.first)


def module_call(self, *args, **kwargs):
    """``torch.nn.Module.__call__`` while a handle is active: outside captures a flag check;
    during them what a pair of global forward hooks would do around torch's own call,
    without the slow call path any global module hook sends every module call down
    (about 3 us a call). One function, as every call during a capture comes through it."""
    state = runtime
    call, is_compiling = state.module_call_of_torch
    # torch.compile traces module calls through this: checked first, so its graphs take
    # the plain path and keep no guard on the capture flag (which would recompile them
    # inside every capture, then trace the driver queries)
    if is_compiling() or not state.module_calls_record:
        return call(self, *args, **kwargs)
    entry = state.modules.get(self)
    if entry is None:
        naming = state.module_naming
        if naming is None or not state.enabled:
            return call(self, *args, **kwargs)
        entry = naming.entry_for(self)
        if entry is None:
            return call(self, *args, **kwargs)
    if not state.enabled or (entry[3] and _launches_nothing(self)):
        return call(self, *args, **kwargs)
    backend = state.backend()
    position = _position(backend) if backend is not None else None
    if position is None:
        return call(self, *args, **kwargs)
    graph, graph_id, first = position
    frames = getattr(state.module_frames, "open", None)
    if frames is None:
        frames = state.module_frames.open = []
    elif frames:
        parent = frames[-1]
        if parent[1] == graph:
            if first > parent[3]:
                if parent[4] is None:
                    parent[4] = [(parent[3], first)]
                else:
                    parent[4].append((parent[3], first))
            parent[3] = first
    backward = entry[2]
    if backward is not None:
        grad_enabled, sequence_nr = state.autograd_calls
        sequence = sequence_nr() if grad_enabled() else None
    else:
        sequence = None
    frame = [self, graph, graph_id, first, None]
    frames.append(frame)
    stacks_key = enter_module_call(sys._getframe()) if state.stack_requests else None
    output = None
    try:
        output = call(self, *args, **kwargs)
    finally:  # also when the forward raises, as torch's always_call hooks
        if stacks_key is not None:
            exit_module_call(stacks_key)
        _module_exit(frames, frame, backend, output, entry[1], sequence, backward)
    return output


def _launches_nothing(module: Any) -> bool:
    """Whether this call of an exact ``nn.Identity`` or ``nn.Dropout`` certainly adds no
    node, so that it needs no node counts around it (a timm ViT-S has 150 of them among
    276 modules): no hook of its own or global one runs (a hook may launch work), and a
    ``Dropout`` is in eval mode or has ``p == 0`` (``at::dropout`` then returns its input)."""
    pre_hooks, hooks = runtime.global_module_hooks
    if module._forward_pre_hooks or module._forward_hooks or pre_hooks or hooks:
        return False
    return type(module) is not runtime.quiet_module_types[1] or not module.training or module.p == 0


def _module_exit(frames, frame, backend, output, annotation, sequence, backward) -> None:
    depth = len(frames) - 1
    while depth >= 0 and frames[depth] is not frame:
        depth -= 1
    if depth < 0:
        return  # a capture began or ended inside the forward: its graph may be gone
    del frames[depth:]  # and any frame whose forward raised unseen
    _, graph, graph_id, first, segments = frame
    end = _node_count_at_exit(backend, graph)
    if end is not None:
        runtime.recorder.add_segments(graph_id, first, end, segments, annotation)
        if frames and frames[-1][1] == graph:
            frames[-1][3] = end
    if sequence is not None:
        claim_backward(output, sequence, backward)


@never_raises("reading the capture graph at a module's forward end")
def _node_count_at_exit(backend, graph: int) -> int:
    return backend.graphs.node_count(graph)
