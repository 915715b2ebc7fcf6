"""Record the launch brackets when Inductor captures compiled code in a CUDA graph.

Cudagraph trees capture in ``CUDAGraphNode._record``; with
``triton.cudagraph_trees=False`` the capture is in ``compile_fx.cudagraphify_impl``.
Both run under ``cgfast.capture.recording()``, which enables annotations for the
capture, resolves its scopes at capture end and remaps them to the executable graph,
keeping what earlier captures recorded; module calls are not wrapped for them (no
module is called in compiled code, and replacing ``Module.__call__`` once Dynamo has
traced it can make a compiled function recompile). Warm-up runs are not captured and record
nothing.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

_WRAPPED_MARK = "_cgfast_records_annotations"


def _recording(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        # Annotated code imports cgfast.capture; until something has, no capture can
        # hold a bracket, and torch's recording is left exactly as it is.
        capture = sys.modules.get("cgfast.capture")
        if capture is None:
            return original(*args, **kwargs)
        from cgfast.capture._recording import compiled_code_capture

        with capture.recording(), compiled_code_capture():
            return original(*args, **kwargs)

    setattr(recorded, _WRAPPED_MARK, True)
    return recorded


def _wrap(owner: Any, name: str) -> None:
    current = getattr(owner, name)
    if not getattr(current, _WRAPPED_MARK, False):
        setattr(owner, name, _recording(current))


def install() -> None:
    from torch._inductor import compile_fx, cudagraph_trees

    _wrap(cudagraph_trees.CUDAGraphNode, "_record")
    _wrap(compile_fx, "cudagraphify_impl")
