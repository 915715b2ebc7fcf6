"""cgfast: say which layer launched every kernel of a CUDA-graph profiler trace.

The trace processor (this module's functions) is Rust; importing cgfast never imports
torch, pandas or dask. The capture layer lives in :mod:`cgfast.capture`, the Inductor
toggle in :mod:`cgfast.inductor`, many traces on a Dask cluster in :mod:`cgfast.batch`.
"""

from cgfast._cgfast import (
    TraceError,
    __version__,
    annotate_file,
    annotate_trace,
    find_traces,
    fix_overlapping_timestamps,
    move_overlapping_to_stream,
)
from cgfast.annotations import load_annotations, save_annotations
from cgfast.diff import diff
from cgfast.summary import summarize, summarize_frame, summary_report

__all__ = [
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
