"""The Rust core of cgfast (``cgfast._cgfast``), as the PyO3 bindings in
``rust/cgfast-py/src/`` export it. ``tests/test_stub.py`` checks that this file names
exactly what the module exports, with the same parameters and defaults."""

import os
from typing import Any, Iterable, Mapping, Sequence, final

from cgfast.reports import AnnotateReport, Defaults, DiffReport, Lanes, Recover, SummaryReport

_Path = str | os.PathLike[str]
# node id -> what the node is annotated with: dicts of args to write, or strings
# (written to args["annotation"])
_Annotations = Mapping[int, Iterable[Mapping[str, Any] | str]]

__all__ = [
    "DEFAULTS",
    "CancelToken",
    "CancelledError",
    "TraceError",
    "__version__",
    "annotate_file",
    "annotate_trace",
    "diff_report",
    "find_traces",
    "fix_overlapping_timestamps",
    "move_overlapping_to_stream",
    "read_annotations",
    "run_cli",
    "summary_report",
    "write_annotations",
]

__version__: str
# the core's defaults of the options: the package's signatures take theirs from here
DEFAULTS: Defaults

class TraceError(ValueError):
    """A trace or annotation file cannot be processed."""

class CancelledError(Exception):
    """A run was cancelled through its CancelToken (its temporary output removed)."""

class CancelToken:
    """A request to stop the runs given this token (``cancel=``)."""

    def __init__(self) -> None: ...
    def cancel(self) -> None: ...
    @property
    def cancelled(self) -> bool: ...

# every option given: the package's functions (cgfast.annotate_file ...) fill in DEFAULTS
def annotate_trace(trace: dict[str, Any], annotations: _Annotations, default_stream: int) -> int: ...
def move_overlapping_to_stream(trace: dict[str, Any], default_stream: int, overlap_stream: int) -> int: ...
def fix_overlapping_timestamps(trace: dict[str, Any], max_adjust_us: float) -> int: ...
def annotate_file(
    trace: _Path,
    annotations: _Path | _Annotations | None,
    output: _Path | None,
    *,
    default_stream: int,
    overlap_stream: int,
    max_adjust_us: float,
    recover: Recover,
    gzip_level: int,
    topology_only: bool,
    spans: str | None,
    lanes: Lanes,
    cancel: CancelToken | None,
) -> AnnotateReport: ...
def read_annotations(
    path: _Path,
) -> tuple[dict[int, list[Any]], dict[int, list[dict[str, Any]]], dict[int, list[str]]]: ...
def write_annotations(
    path: _Path,
    annotations: _Annotations,
    graphs: Mapping[int, Iterable[Mapping[str, Any]]] | None = None,
    stacks: Mapping[int, Sequence[str]] | None = None,
    traces: Sequence[_Path] | None = None,
    launch_phases: Mapping[int, str] | None = None,
) -> None: ...
def run_cli(argv: Sequence[str]) -> int: ...
def summary_report(
    paths: _Path | Iterable[_Path],
    *,
    by: str | None,
    steps: bool,
    top: int,
    jobs: int,
    chart: _Path | None,
    depth: int | None,
    group_layers: bool,
    hierarchy: bool | None,
    cancel: CancelToken | None,
    efficiency: bool = False,
    peak_tflops: float | None = None,
    peak_gbps: float | None = None,
) -> SummaryReport: ...
def find_traces(paths: _Path | Iterable[_Path], *, annotated: bool = False) -> list[str]: ...
def diff_report(
    base: _Path | Iterable[_Path],
    test: _Path | Iterable[_Path],
    *,
    by: str | None,
    depth: int | None,
    group_layers: bool,
    hierarchy: bool | None,
    threshold: float,
    min_change: float,
    per_rank: bool,
    fail_if_slower: float | None,
    min_share: float,
    pool_runs: bool,
    jobs: int,
    chart: _Path | None,
    cancel: CancelToken | None,
) -> DiffReport: ...

# cgfast.capture's graph queries (private, not in __all__): the extension looks the
# driver and CUPTI functions up itself in libraries the process has loaded, and calls
# nothing else
@final
class _GraphFunctions:
    """Driver (and CUPTI) functions the extension resolved itself; made only by
    ``_resolve_graph_functions``."""

def _resolve_graph_functions(libcuda: str, libcupti: str | None = None) -> _GraphFunctions: ...
def _graph_node_count(functions: _GraphFunctions, graph: int) -> int: ...
def _walk_graph(
    functions: _GraphFunctions, graph: int
) -> tuple[int, list[tuple[int, int, str | None, list[int], Any, Any]], int]: ...
