"""Which values (modules, labels, kernels) got slower or faster between two runs.

``cgfast.diff(base, test)`` is ``cgfast diff BASE TEST --format json`` from Python: the
Rust core reads both sides' annotated traces and compares them, each graph replay one
sample. A value's change is the Hodges-Lehmann estimate of the shift of its time per
replay (the median of all test-minus-base differences between one replay of each side),
``ci_us`` its distribution-free 95% confidence interval from the Mann-Whitney U
distribution. ``verdict`` is ``"slower"`` or ``"faster"`` when the interval lies above or
below 0 and the change is at least ``threshold`` percent of the base median and at least
``min_change`` percent of the base's mean busy time per replay, ``"same"`` otherwise,
``"new"`` or ``"gone"`` when one side has none of the value's kernels.

Replays of one process share its memory placement, so where each side has several runs
(the traces of separate processes; ``runs`` says how many), a value's change is the mean
over its runs of each run's median time per replay, test minus base, and ``ci_us`` comes
from a hierarchical bootstrap over the runs and their replays; with one run on a side,
``runs["note"]`` says that the intervals hold the spread between replays only.

Importing this module imports neither pandas nor torch.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from cgfast import _cgfast
from cgfast._cgfast import CancelToken
from cgfast._typing import PathLike, Paths
from cgfast.reports import DiffReport

DEFAULTS = _cgfast.DEFAULTS


def diff(
    base: Paths,
    test: Paths,
    by: Optional[str] = None,
    *,
    depth: Optional[int] = None,
    group_layers: bool = DEFAULTS["group_layers"],
    hierarchy: Optional[bool] = None,
    threshold: float = DEFAULTS["threshold"],
    min_change: float = DEFAULTS["min_change"],
    per_rank: bool = DEFAULTS["per_rank"],
    fail_if_slower: Optional[float] = None,
    min_share: float = DEFAULTS["min_share"],
    pool_runs: bool = DEFAULTS["pool_runs"],
    jobs: Optional[int] = None,
    chart: Optional[PathLike] = None,
    frame: Optional[Literal["pandas"]] = None,
    cancel: Optional[CancelToken] = None,
) -> DiffReport:
    """The diff of ``test`` against ``base`` (each: an annotated trace, a directory
    searched for ``*.annotated.json[.gz]``, a glob pattern, or an iterable of them).

    ``by``: the key grouped by (``"module"``, ``"name"``, ``"kernel"`` for the kernel's own
    name, or any key of ``args``; ``None``: ``module`` where the traces carry it, else
    ``name``, else ``kernel``). ``depth`` and ``group_layers`` roll module paths up as
    ``cgfast summary`` does; ``hierarchy`` compares every dotted path with the paths under
    it (``tree``) and draws the icicle in an HTML ``chart`` (``None``: for module paths and
    rolled-up values). ``threshold``, ``min_change``, ``fail_if_slower`` and ``min_share``
    are percent, as on the command line; with ``fail_if_slower`` the report's ``gate``
    says whether it failed and names each offender. ``per_rank`` adds ``ranks``, a comparison per rank.
    ``pool_runs``: every trace of a side is of one run (intervals between replays only,
    no ``runs``: the report of cgfast before it told runs apart).
    ``chart``: also write a ``.svg`` or ``.html`` chart there. ``frame="pandas"``: ``rows``
    (and ``tree``) as pandas DataFrames, nested fields flattened (``base_median_us``, ...).

    Raises ``cgfast.TraceError`` for a trace that cannot be read, a side without graphed
    replays, or a key one side carries and the other does not. Ctrl-C on the main thread
    stops it (KeyboardInterrupt), as ``cancel`` (a ``CancelToken``) does from any thread
    (``cgfast.CancelledError``).
    """
    if frame not in (None, "pandas"):
        raise ValueError(f'frame must be None or "pandas", not {frame!r}')
    if frame:
        pandas = _pandas()
    report: DiffReport = _cgfast.diff_report(
        base,
        test,
        by=by,
        depth=depth,
        group_layers=group_layers,
        hierarchy=hierarchy,
        threshold=threshold,
        min_change=min_change,
        per_rank=per_rank,
        fail_if_slower=fail_if_slower,
        min_share=min_share,
        pool_runs=pool_runs,
        jobs=jobs or 0,
        chart=chart,
        cancel=cancel,
    )
    if frame:
        report["rows"] = pandas.json_normalize(report["rows"], sep="_")
        if "tree" in report:
            report["tree"] = pandas.json_normalize(report["tree"], sep="_")
    return report


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as e:
        raise ImportError(
            'a DataFrame needs pandas: pip install pandas (or cgfast[pandas]); diff() without frame="pandas" returns plain rows'
        ) from e
    return pandas
