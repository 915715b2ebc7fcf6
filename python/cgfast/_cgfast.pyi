"""The Rust core of cgfast (``cgfast._cgfast``), as the PyO3 bindings in
``rust/cgfast-py/src/`` export it. ``tests/test_stub.py`` checks that this file names
exactly what the module exports, with the same parameters and defaults."""

import os
from typing import Any, Iterable, Literal, Mapping, Sequence, final

_Path = str | os.PathLike[str]
# node id -> what the node is annotated with: dicts of args to write, or strings
# (written to args["annotation"])
_Annotations = Mapping[int, Iterable[Mapping[str, Any] | str]]

__all__ = [
    "DEFAULTS",
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
# the core's defaults of the annotate options, which the signatures below show
DEFAULTS: dict[str, int | float | str]

class TraceError(ValueError):
    """A trace or annotation file cannot be processed."""

def annotate_trace(trace: dict[str, Any], annotations: _Annotations, default_stream: int = 7) -> int: ...
def move_overlapping_to_stream(
    trace: dict[str, Any], default_stream: int = 7, overlap_stream: int = 8
) -> int: ...
def fix_overlapping_timestamps(trace: dict[str, Any], max_adjust_us: float = 1.0) -> int: ...
def annotate_file(
    trace: _Path,
    annotations: _Path | _Annotations | None = None,
    output: _Path | None = None,
    *,
    default_stream: int = 7,
    overlap_stream: int = 8,
    max_adjust_us: float = 1.0,
    recover: Literal["auto", "always", "never"] = "auto",
    gzip_level: int = 3,
    topology_only: bool = False,
    spans: str | None = "module",
    lanes: Literal["all", "none", "reference"] = "all",
) -> dict[str, Any]: ...
def read_annotations(
    path: _Path,
) -> tuple[dict[int, list[Any]], dict[int, list[dict[str, Any]]], dict[int, list[str]]]: ...
def write_annotations(
    path: _Path,
    annotations: _Annotations,
    graphs: Mapping[int, Iterable[Mapping[str, Any]]] | None = None,
    stacks: Mapping[int, Sequence[str]] | None = None,
) -> None: ...
def run_cli(argv: Sequence[str]) -> int: ...
def summary_report(
    paths: _Path | Iterable[_Path],
    *,
    by: str | None = None,
    steps: bool = False,
    top: int = 3,
    jobs: int = 0,
    chart: _Path | None = None,
    depth: int | None = None,
    group_layers: bool = False,
    hierarchy: bool | None = None,
) -> dict[str, Any]: ...
def find_traces(paths: _Path | Iterable[_Path], *, annotated: bool = False) -> list[str]: ...
def diff_report(
    base: _Path | Iterable[_Path],
    test: _Path | Iterable[_Path],
    *,
    by: str | None = None,
    depth: int | None = None,
    group_layers: bool = False,
    hierarchy: bool | None = None,
    threshold: float = 2.0,
    per_rank: bool = False,
    fail_if_slower: float | None = None,
    min_share: float = 1.0,
    jobs: int = 0,
    chart: _Path | None = None,
) -> dict[str, Any]: ...

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
