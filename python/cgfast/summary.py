"""Where the GPU time of graph replays goes, per value of an annotation key.

The numbers are computed by the Rust core (the same as ``cgfast summary``):

- ``busy_us`` of the whole: the union of the graphed kernels' ``[ts, ts + dur)`` over
  all lanes, per trace and GPU, so kernels that overlap on different streams count once;
- ``attributed_us`` of a value: every instant of busy time split equally among the
  kernels running then, summed over the value's kernels; ``share`` is that over the
  busy time, so the shares of all values (unannotated kernels included) sum to 1;
- ``busy_us`` of a value: the union of its own kernels (what it takes if nothing else
  ran); ``total_us``: the sum of their ``dur``.

Importing this module imports neither pandas nor torch.
"""

from __future__ import annotations

from typing import Any, List, Optional, Union

from cgfast import _cgfast
from cgfast._cgfast import CancelToken
from cgfast._typing import PathLike, Paths
from cgfast.reports import EfficiencyRow, ReplayRow, SummaryReport, SummaryRow

DEFAULTS = _cgfast.DEFAULTS


def summary_report(
    paths: Paths,
    by: Optional[str] = None,
    steps: bool = DEFAULTS["steps"],
    *,
    top: int = DEFAULTS["top"],
    jobs: Optional[int] = None,
    chart: Optional[PathLike] = None,
    depth: Optional[int] = None,
    group_layers: bool = DEFAULTS["group_layers"],
    hierarchy: Optional[bool] = None,
    cancel: Optional[CancelToken] = None,
    efficiency: bool = False,
    peak_tflops: Optional[float] = None,
    peak_gbps: Optional[float] = None,
) -> SummaryReport:
    """The whole report as a dict, as ``cgfast summary --format json`` prints it (with
    ``replay_rows`` added when ``steps``). ``paths``: annotated traces, directories
    (searched for ``*.annotated.json[.gz]``) or glob patterns; ``chart``: also write a
    ``.svg`` or ``.html`` chart there. ``depth``: roll values (module paths) up to their
    first ``depth`` dotted segments; ``group_layers``: merge numbered siblings
    (``model.layers.0.mlp`` and ``model.layers.1.mlp`` as ``model.layers.*.mlp``);
    ``hierarchy``: draw the values' tree as an icicle in the chart (``None``, the default:
    when ``by`` is ``"module"`` or values are rolled up; ``False``: never, bars only).
    ``by``: the key grouped by (``"module"``, ``"name"``, ``"kernel"`` for the kernel's own
    name, or any key of ``args``; ``None``, the default: ``module`` where the traces carry
    it, else ``name``, else ``kernel``; the report's ``by`` says which).
    ``efficiency``: add ``efficiency``, how close each value comes to the GPU's roofline
    from the FLOP and byte counts its kernels carry (``cgfast summary --efficiency``);
    ``peak_tflops`` and ``peak_gbps`` replace the peaks of the GPU the traces record.
    Raises ``cgfast.TraceError`` naming every trace that cannot be read. Ctrl-C on the
    main thread stops it (KeyboardInterrupt), as ``cancel`` (a ``CancelToken``) does
    from any thread (``cgfast.CancelledError``)."""
    return _cgfast.summary_report(
        paths,
        by=by,
        steps=steps,
        top=top,
        jobs=jobs or 0,
        chart=chart,
        depth=depth,
        group_layers=group_layers,
        hierarchy=hierarchy,
        cancel=cancel,
        efficiency=efficiency,
        peak_tflops=peak_tflops,
        peak_gbps=peak_gbps,
    )


def summarize(
    paths: Paths,
    by: Optional[str] = None,
    steps: bool = DEFAULTS["steps"],
    *,
    top: int = DEFAULTS["top"],
    jobs: Optional[int] = None,
    chart: Optional[PathLike] = None,
    frame: bool = False,
    depth: Optional[int] = None,
    group_layers: bool = DEFAULTS["group_layers"],
    hierarchy: Optional[bool] = None,
    cancel: Optional[CancelToken] = None,
    efficiency: bool = False,
    peak_tflops: Optional[float] = None,
    peak_gbps: Optional[float] = None,
) -> Union[List[SummaryRow], List[ReplayRow], List[EfficiencyRow], Any]:
    """Rows of the summary of ``paths`` grouped by ``args[by]``, largest share first.

    Without ``steps``, a row per value: ``value`` (None for graphed kernels without the
    key), ``kernels``, ``total_us``, ``mean_us``, ``busy_us``, ``attributed_us``,
    ``share`` and ``top_kernels`` (``[{name, kernels, total_us}]``, ``top`` of them).
    With ``steps``, a row per value per replay: ``trace``, ``replay`` (the
    correlation id), ``value``, ``kernels``, ``total_us``, ``busy_us``,
    ``attributed_us``, ``share`` (of the replay's busy time), ``replay_start_us``,
    ``replay_span_us``, ``replay_busy_us``.

    With ``efficiency``, a row per value of the efficiency report instead (see
    :class:`cgfast.reports.EfficiencyRow`), the most time above the roofline first;
    ``peak_tflops`` and ``peak_gbps`` replace the GPU's peaks.

    ``depth``, ``group_layers`` and ``hierarchy`` roll the values up as module paths
    and draw their tree, as in :func:`summary_report`.

    ``frame=True`` returns a pandas DataFrame of the rows instead (pandas is needed
    only then).
    """
    if frame:
        pandas = _pandas()
    report = summary_report(
        paths,
        by,
        steps,
        top=top,
        jobs=jobs,
        chart=chart,
        depth=depth,
        group_layers=group_layers,
        hierarchy=hierarchy,
        cancel=cancel,
        efficiency=efficiency,
        peak_tflops=peak_tflops,
        peak_gbps=peak_gbps,
    )
    rows: Union[List[SummaryRow], List[ReplayRow], List[EfficiencyRow]]
    if efficiency:
        rows = report["efficiency"]["rows"]
    else:
        rows = report["replay_rows"] if steps else report["rows"]
    return pandas.DataFrame(rows) if frame else rows


def summarize_frame(
    paths: Paths, by: Optional[str] = None, steps: bool = DEFAULTS["steps"], **options: Any
) -> Any:
    """:func:`summarize` as a pandas DataFrame."""
    return summarize(paths, by, steps, frame=True, **options)


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as e:
        raise ImportError(
            "a DataFrame needs pandas: pip install pandas (or cgfast[pandas]); summarize() without frame=True returns plain rows"
        ) from e
    return pandas
