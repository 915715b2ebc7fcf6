"""The dicts the trace functions return, typed: what ``annotate_file`` (and the
command line's ``--json``) reports, what ``summary_report``, ``diff`` and
``annotate_many`` return, and the core's defaults (``cgfast._cgfast.DEFAULTS``).

A key that is not always there is a ``total=False`` class of its own, whose keys the
report holds only as its docstring says.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, TypedDict, Union

Recover = Literal["auto", "always", "never"]
Lanes = Literal["all", "none", "reference"]


class Defaults(TypedDict):
    """The core's defaults of the options of ``annotate_file``, the dict passes,
    ``summary_report`` and ``diff`` (``cgfast._cgfast.DEFAULTS``; ``threshold``,
    ``min_change`` and ``min_share`` in percent): the package's signatures show these."""

    default_stream: int
    overlap_stream: int
    max_adjust_us: float
    recover: Recover
    gzip_level: int
    topology_only: bool
    spans: Optional[str]
    lanes: Lanes
    steps: bool
    top: int
    group_layers: bool
    threshold: float
    min_change: float
    min_share: float
    per_rank: bool
    pool_runs: bool


class _Recovery(TypedDict):
    replays: int
    recovered_replays: int
    ambiguous_replays: int
    unmatched_replays: int
    recovered_events: int
    ambiguous_events: int
    unmatched_events: int
    unresolved_events: int
    tied_events: int
    no_topology: bool


class Recovery(_Recovery, total=False):
    """What node-id recovery did; the stamp counts are there unless
    ``topology_only``."""

    stamped_replays: int
    equivalent_replays: int
    unknown_stamps: int
    unfit_stamps: int
    malformed_stamps: int
    base_name_replays: int


class Overlap(TypedDict):
    """An overlap too large to repair, left as it is."""

    lane: str
    name: str
    ts: float
    overlap_us: float


class _AnnotateReport(TypedDict):
    input: str
    output: str
    annotations: Optional[str]
    annotations_loaded: int
    events: int
    annotated: int
    noise_removed: int
    metadata_removed: int
    moved: int
    fixed: int
    large_overlaps: int
    largest_overlap_us: float
    flows_moved: int
    lanes_named: int
    recovery: Recovery
    invalid_utf8: int
    invalid_utf8_at: Optional[int]
    input_bytes: int
    json_bytes: int
    seconds: float
    mb_per_s: float


class AnnotateReport(_AnnotateReport, total=False):
    """What ``annotate_file`` did; ``spans`` is there unless spans were off,
    ``overlaps`` always from ``annotate_file`` (with ``--json`` only with
    ``--verbose``). ``invalid_utf8`` counts the invalid UTF-8 sequences in the trace's
    strings, copied through as they are (``invalid_utf8_at``: the byte offset of the
    first in the decompressed JSON, or None)."""

    spans: int
    overlaps: List[Overlap]


class TopKernel(TypedDict):
    """One of the kernel names that took most of a value's time."""

    name: str
    kernels: int
    total_us: float


class _SummaryRow(TypedDict):
    value: Optional[str]
    kernels: int
    total_us: float
    mean_us: float
    busy_us: float
    attributed_us: float
    share: float
    top_kernels: List[TopKernel]


class SummaryRow(_SummaryRow, total=False):
    """A value's line of the summary; the replay figures with ``steps``."""

    replays: int
    replay_min_us: float
    replay_median_us: float
    replay_max_us: float
    replay_stdev_us: float


class _SummaryTotals(TypedDict):
    traces: int
    events: int
    kernels: int
    replays: int
    total_us: float
    busy_us: float
    unannotated_kernels: int
    unannotated_us: float
    coverage: float
    ungraphed_kernels: int
    ungraphed_us: float
    unusable_events: int


class _LeftUnresolved(TypedDict, total=False):
    unresolved_kernels: int
    unresolved_us: float
    ambiguous_replay_kernels: int
    ambiguous_replay_us: float
    unmatched_replay_kernels: int
    unmatched_replay_us: float


class SummaryTotals(_SummaryTotals, _LeftUnresolved):
    """The numbers above the rows; the kernels of unresolved, ambiguous and
    unmatched replays only where there are some."""


class _SummaryTrace(TypedDict):
    path: str
    events: int
    kernels: int
    replays: int
    total_us: float
    busy_us: float
    kernels_without_correlation: int
    ungraphed_kernels: int
    ungraphed_us: float
    unusable_events: int


class SummaryTrace(_SummaryTrace, _LeftUnresolved):
    """One trace's totals, as ``SummaryTotals``."""


class Spread(TypedDict):
    """The spread of a figure over replays."""

    count: int
    min: float
    median: float
    max: float
    mean: float
    stdev: float


class ReplaySpread(TypedDict):
    """How replays' busy time and span spread."""

    busy_us: Spread
    span_us: Spread


class ReplayValue(TypedDict):
    """A value within a replay."""

    value: Optional[str]
    kernels: int
    total_us: float
    busy_us: float
    attributed_us: float
    share: float


class ReplayRow(ReplayValue):
    """A value in one replay (``steps``): a row of ``replay_rows``, its replay's figures
    beside it."""

    trace: str
    replay: int
    replay_start_us: float
    replay_span_us: float
    replay_busy_us: float


class SummaryReplay(TypedDict):
    """One replay (``steps``)."""

    trace: str
    replay: int
    start_us: float
    span_us: float
    kernels: int
    total_us: float
    busy_us: float
    values: List[ReplayValue]


class _SummaryReport(TypedDict):
    by: str
    totals: SummaryTotals
    traces: List[SummaryTrace]
    rows: List[SummaryRow]


class EfficiencyRow(TypedDict):
    """A value's line of the efficiency report (``cgfast summary --efficiency``): the
    figures are over its kernels with FLOP and byte counts (``counted_kernels``, taking
    ``counted_us`` of its ``attributed_us``: ``coverage``); None where there are no
    counts or a peak is unknown."""

    value: Optional[str]
    kernels: int
    counted_kernels: int
    attributed_us: float
    counted_us: float
    coverage: float
    flops_per_replay: Optional[float]
    bytes_per_replay: Optional[float]
    tflops: Optional[float]
    gbps: Optional[float]
    intensity: Optional[float]
    bound_us: Optional[float]
    peak_fraction: Optional[float]
    above_roofline_us: Optional[float]


class Efficiency(TypedDict):
    """The efficiency report: the GPUs the traces record (``devices``), the table's
    entry for them (``gpu``), the peaks used (TFLOP/s per dtype class, GB/s; absent or
    None where unknown), the share of busy time with counts, notes, and a row per value,
    the most time above the roofline first."""

    devices: List[str]
    gpu: Optional[str]
    peak_tflops: Dict[str, float]
    peak_gbps: Optional[float]
    default_dtype: str
    coverage: float
    notes: List[str]
    rows: List[EfficiencyRow]


class SummaryReport(_SummaryReport, total=False):
    """What ``summary_report`` returns (``cgfast summary --format json``): ``depth``
    and ``group_layers`` where values are rolled up; ``replay_spread``, ``replays``
    and ``replay_rows`` with ``steps``; ``efficiency`` with ``efficiency=True``."""

    depth: Optional[int]
    group_layers: bool
    replay_spread: ReplaySpread
    replays: List[SummaryReplay]
    replay_rows: List[ReplayRow]
    efficiency: Efficiency


class DiffRuns(TypedDict):
    """The runs (processes) of each side of a diff, and what the intervals hold:
    ``between_runs`` when both sides have at least 2 runs (then each value's interval
    is a hierarchical bootstrap over its runs and their replays); ``note`` says it in
    words, with one run on a side that run-to-run variation is not in the intervals
    and how many runs a side would measure it."""

    base: int
    test: int
    between_runs: bool
    note: str


class DiffReport(TypedDict, total=False):
    """The report, as ``cgfast diff --format json`` prints it (``rows`` and ``tree`` are
    pandas DataFrames with ``frame="pandas"``). Present in every report: ``by``,
    ``by_default``, ``by_note``, ``method``, ``confidence``, ``threshold_pct``,
    ``min_change_pct``, ``traces``, ``graphs``, ``base``, ``test``, ``runs`` (not with
    ``pool_runs``), ``total``, ``mean_delta_us``, ``explained``, ``rows``, ``notes``;
    ``tree`` for module paths (or ``hierarchy=True``), ``depth`` and ``group_layers`` for
    rolled-up values, ``ranks`` with ``per_rank``, ``gate`` with ``fail_if_slower``.
    With several runs a side, each row has ``runs`` too: the runs each side has the
    value in."""

    by: str
    by_default: bool
    by_note: Optional[str]
    method: str
    confidence: float
    threshold_pct: float
    min_change_pct: float
    depth: Optional[int]
    group_layers: bool
    traces: Dict[str, List[Dict[str, Any]]]
    graphs: Optional[int]
    base: Dict[str, Any]
    test: Dict[str, Any]
    runs: DiffRuns
    total: Dict[str, Any]
    mean_delta_us: float
    explained: Optional[float]
    rows: Any
    tree: Any
    ranks: List[Dict[str, Any]]
    gate: Dict[str, Any]
    notes: List[str]


class AnnotatedTrace(TypedDict):
    """A trace ``annotate_many`` annotated."""

    input: str
    ok: Literal[True]
    report: AnnotateReport


class FailedTrace(TypedDict):
    """A trace ``annotate_many`` could not annotate."""

    input: str
    ok: Literal[False]
    error: str


BatchResult = Union[AnnotatedTrace, FailedTrace]
"""One entry of what ``annotate_many`` returns (tell them apart by ``ok``)."""
