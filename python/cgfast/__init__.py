"""cgfast: say which layer launched every kernel of a CUDA-graph profiler trace.

The trace processor (this module's functions) is Rust; importing cgfast never imports
torch. The capture layer lives in :mod:`cgfast.capture`, the Inductor toggle in
:mod:`cgfast.inductor`.
"""

from cgfast._cgfast import (
    __version__,
    annotate_file,
    annotate_trace,
    fix_overlapping_timestamps,
    move_overlapping_to_stream,
)
from cgfast.annotations import load_annotations, save_annotations

__all__ = [
    "__version__",
    "annotate_file",
    "annotate_trace",
    "fix_overlapping_timestamps",
    "load_annotations",
    "move_overlapping_to_stream",
    "save_annotations",
]
