"""The dicts the trace functions return are typed (`cgfast.reports`): each report has
exactly the keys its TypedDict names (the optional ones only where its docstring says),
and mypy checks code that reads them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cgfast
from cgfast import reports
from cgfast.batch import annotate_many
from helpers import run_cli

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "h200-compiled-transformer"
TRACE = EXAMPLE / "000000.h200.pt.trace.json.gz"


def annotations() -> Path:
    return next(EXAMPLE.glob("kernel_annotations_*.json"))


def assert_shaped(value: dict, typed: type, present: set[str] = frozenset()) -> None:
    """`value` has every required key of `typed`, and of its optional ones `present`."""
    assert set(value) == typed.__required_keys__ | set(present), (typed.__name__, sorted(value))
    assert set(present) <= typed.__optional_keys__, typed.__name__


def test_annotate_reports_have_the_typed_keys(tmp_path):
    report = cgfast.annotate_file(TRACE, annotations(), tmp_path / "o.json")
    assert_shaped(report, reports.AnnotateReport, {"spans", "overlaps"})
    assert_shaped(report["recovery"], reports.Recovery, reports.Recovery.__optional_keys__)
    for overlap in report["overlaps"]:
        assert_shaped(overlap, reports.Overlap)
    plain = cgfast.annotate_file(TRACE, annotations(), tmp_path / "p.json", spans=None, topology_only=True)
    assert_shaped(plain, reports.AnnotateReport, {"overlaps"})
    assert_shaped(plain["recovery"], reports.Recovery)
    # the command line's --json is the same report, the overlaps only with --verbose
    proc = run_cli(TRACE, "-a", annotations(), "-o", tmp_path / "c.json", "--json")
    assert proc.returncode == 0, proc.stderr
    assert_shaped(json.loads(proc.stdout), reports.AnnotateReport, {"spans"})


def test_summary_reports_have_the_typed_keys(tmp_path):
    out = tmp_path / "t.annotated.json"
    cgfast.annotate_file(TRACE, annotations(), out)
    report = cgfast.summary_report(out, by="module")
    assert_shaped(report, reports.SummaryReport)
    assert_shaped(report["totals"], reports.SummaryTotals)
    for trace in report["traces"]:
        assert_shaped(trace, reports.SummaryTrace)
    for row in report["rows"]:
        assert_shaped(row, reports.SummaryRow)
        for kernel in row["top_kernels"]:
            assert_shaped(kernel, reports.TopKernel)
    steps = cgfast.summary_report(out, by="module", steps=True, depth=2)
    assert_shaped(
        steps, reports.SummaryReport, {"depth", "group_layers", "replay_spread", "replays", "replay_rows"}
    )
    for row in steps["rows"]:
        assert_shaped(row, reports.SummaryRow, reports.SummaryRow.__optional_keys__)
    assert_shaped(steps["replay_spread"], reports.ReplaySpread)
    assert_shaped(steps["replay_spread"]["busy_us"], reports.Spread)
    for replay in steps["replays"]:
        assert_shaped(replay, reports.SummaryReplay)
        for value in replay["values"]:
            assert_shaped(value, reports.ReplayValue)
    for row in steps["replay_rows"]:
        assert_shaped(row, reports.ReplayRow)


def test_diff_reports_have_the_typed_keys(tmp_path):
    out = tmp_path / "000000.t.annotated.json"
    cgfast.annotate_file(TRACE, annotations(), out)
    report = cgfast.diff(out, out, by="module", fail_if_slower=5, per_rank=True)
    assert set(report) <= set(reports.DiffReport.__annotations__), sorted(report)
    assert_shaped(report["runs"], reports.DiffRuns)
    for rank in report["ranks"]:
        assert_shaped(rank["runs"], reports.DiffRuns)


def test_batch_results_have_the_typed_keys(tmp_path):
    trace = tmp_path / "000000.a.pt.trace.json.gz"
    shutil.copy(TRACE, trace)
    shutil.copy(annotations(), tmp_path / annotations().name)
    (tmp_path / "000001.b.pt.trace.json").write_text("not a trace")
    done, failed = annotate_many(tmp_path)
    assert done["ok"] and not failed["ok"]
    assert_shaped(done, reports.AnnotatedTrace)
    assert_shaped(done["report"], reports.AnnotateReport, {"spans", "overlaps"})
    assert_shaped(failed, reports.FailedTrace)


def test_the_defaults_are_typed():
    assert_shaped(cgfast._cgfast.DEFAULTS, reports.Defaults)


def test_mypy_checks_code_that_reads_the_reports(tmp_path):
    pytest.importorskip("mypy")
    snippet = tmp_path / "use_reports.py"
    snippet.write_text(
        "import cgfast\n"
        "report = cgfast.annotate_file('t.json')\n"
        "annotated: int = report['annotated']\n"
        "first: int | None = report['invalid_utf8_at']\n"
        "rows = cgfast.summary_report('t.annotated.json')['rows']\n"
        "share: float = rows[0]['share']\n"
        "wrong: str = report['annotated']\n"
        "missing = report['no_such_key']\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-incremental", "--python-version", "3.10", str(snippet)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(ROOT / "python")},
    )
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["7", "8"], proc.stdout
    assert "incompatible types in assignment" in errors[0].lower(), errors
    assert '"AnnotateReport" has no key "no_such_key"' in errors[1], errors
