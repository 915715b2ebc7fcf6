"""cgfast: say which layer launched every kernel of a CUDA-graph profiler trace.

The trace processor (this module's functions) is Rust; importing cgfast never imports
torch, pandas or dask, and imports each function's module when the function is first
used (``cgfast run``'s start-up hook, in every process of a program, imports this
package). The capture layer lives in :mod:`cgfast.capture`, the Inductor toggle in
:mod:`cgfast.inductor`, many traces on a Dask cluster in :mod:`cgfast.batch`; the dicts
the trace functions return are typed in :mod:`cgfast.reports`.
"""

import importlib
from typing import TYPE_CHECKING, Any, List

if TYPE_CHECKING:
    from cgfast._annotate import (
        annotate_file,
        annotate_trace,
        fix_overlapping_timestamps,
        move_overlapping_to_stream,
    )
    from cgfast._cgfast import CancelledError, CancelToken, TraceError, __version__, find_traces
    from cgfast.annotations import load_annotations, save_annotations
    from cgfast.diff import diff
    from cgfast.reports import AnnotateReport, SummaryReport
    from cgfast.summary import summarize, summarize_frame, summary_report

_HOMES = {
    "cgfast._annotate": (
        "annotate_file",
        "annotate_trace",
        "fix_overlapping_timestamps",
        "move_overlapping_to_stream",
    ),
    "cgfast._cgfast": ("CancelledError", "CancelToken", "TraceError", "__version__", "find_traces"),
    "cgfast.annotations": ("load_annotations", "save_annotations"),
    "cgfast.diff": ("diff",),
    "cgfast.reports": ("AnnotateReport", "SummaryReport"),
    "cgfast.summary": ("summarize", "summarize_frame", "summary_report"),
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "AnnotateReport",
    "CancelToken",
    "CancelledError",
    "SummaryReport",
    "TraceError",
    "__version__",
    "annotate_file",
    "annotate_trace",
    "diff",
    "find_traces",
    "fix_overlapping_timestamps",
    "load_annotations",
    "move_overlapping_to_stream",
    "save_annotations",
    "summarize",
    "summarize_frame",
    "summary_report",
]


def __getattr__(name: str) -> Any:
    home = _HOME_OF.get(name)
    if home is None:
        raise AttributeError(f"module 'cgfast' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted({*globals(), *__all__})
