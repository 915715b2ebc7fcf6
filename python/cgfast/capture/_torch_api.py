"""torch's own annotation API (torch >= 2.13), recorded by cgfast where torch cannot.

torch records ``torch.cuda.graph(..., enable_annotations=True)`` captures and its
``mark_kernels`` / ``mark_stream`` scopes only through ``cudaGraphNodeGetToolsId`` (CUDA
>= 13.1 drivers); elsewhere they are no-ops. While ``install()`` is active and torch
says tools ids are unavailable, these replacements (``_patches`` puts them in) make
cgfast record them instead:

* ``torch.cuda._graph_annotations._set_annotations_enabled`` (what ``torch.cuda.graph``
  calls around an annotated capture) also turns cgfast's recording on for the capture;
* ``mark_kernels`` (looked up at call time by torch's ``mark_stream`` too) opens a
  cgfast scope with the same annotation and ``backward`` keyword.

Where torch has tools ids, everything goes to torch's own functions: nothing is
recorded twice. Code that bound ``mark_kernels`` by name before ``install()``
(``from torch.cuda.graph_annotations import mark_kernels`` at import) keeps torch's
function.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any, List, Tuple

from cgfast.capture._runtime import runtime
from cgfast.capture._scopes import mark_kernels as cgfast_mark_kernels

_MODULES = ("torch.cuda._graph_annotations", "torch.cuda.graph_annotations")


def _torch_module():
    try:
        return importlib.import_module(_MODULES[0])
    except ImportError:  # torch < 2.13
        return None


def _cgfast_records(private) -> bool:
    """Whether torch cannot record (no tools ids) and cgfast can."""
    try:
        unavailable = private._is_tools_id_unavailable()
    except Exception:  # a private torch API: where it fails, torch records as before
        return False
    return unavailable and runtime.backend() is not None


def replacements() -> List[Tuple[Any, str, Any]]:
    """``(module, name, replacement)`` of each of torch's functions to replace, in the
    modules that still hold torch's own; none before torch 2.13."""
    private = _torch_module()
    if (
        private is None
        or not hasattr(private, "mark_kernels")
        or not hasattr(private, "_set_annotations_enabled")
    ):
        return []
    set_enabled = private._set_annotations_enabled

    @functools.wraps(set_enabled)
    def _set_annotations_enabled(enabled: bool) -> None:
        set_enabled(enabled)
        if enabled and _cgfast_records(private):
            runtime.hold_for_torch()
        elif not enabled:
            runtime.release_for_torch()

    torch_mark_kernels = private.mark_kernels

    @functools.wraps(torch_mark_kernels)
    def mark_kernels(annotation, *, backward: bool = True):
        if private._annotations_enabled and _cgfast_records(private):
            return cgfast_mark_kernels(annotation, backward=backward)
        return torch_mark_kernels(annotation, backward=backward)

    found = []
    for module_name in _MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name, original, replacement in (
            ("_set_annotations_enabled", set_enabled, _set_annotations_enabled),
            ("mark_kernels", torch_mark_kernels, mark_kernels),
        ):
            if module.__dict__.get(name) is original:
                found.append((module, name, replacement))
    return found
