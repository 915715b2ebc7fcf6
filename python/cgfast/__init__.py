"""cgfast: say which layer launched every kernel of a CUDA-graph profiler trace.

The trace processor (this module's functions) is Rust; importing cgfast never imports
torch, pandas or dask. The capture layer lives in :mod:`cgfast.capture`, the Inductor
toggle in :mod:`cgfast.inductor`, many traces on a Dask cluster in :mod:`cgfast.batch`;
the dicts the trace functions return are typed in :mod:`cgfast.reports`.
"""

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
