"""`cgfast summary` without `--by`: module where the traces carry it, else name, else the
kernel's own name, said in the first line; `--by kernel`; nothing annotated is 0.0%."""

from __future__ import annotations

import json
import math

import pytest

from trace_files import cgfast, kernel, write_trace

cg = pytest.importorskip("cgfast")


def events(**args):
    """Two replays of two kernels, with `args` (per kernel name) on them."""
    out = []
    for replay in (1, 2):
        for node, name in enumerate(("gemm", "softmax"), start=1):
            e = kernel(100 * replay + 20 * node, 10, name=name, replay=replay, node=node)
            e["args"].update(args.get(name, {}))
            out.append(e)
    return out


def first_line(*args):
    run = cgfast("summary", *args)
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()[0]


def test_the_default_key_is_the_first_the_traces_carry(tmp_path):
    both = write_trace(
        tmp_path / "both.annotated.json",
        events(gemm={"module": "m.attn", "name": "attention"}, softmax={"name": "attention"}),
    )
    names = write_trace(tmp_path / "names.annotated.json", events(gemm={"name": "attention"}))
    bare = write_trace(tmp_path / "bare.annotated.json", events())
    assert first_line(both) == "cgfast summary by args.module: 1 trace, 4 graphed kernels in 2 replays"
    assert first_line(names) == (
        "cgfast summary by args.name (no graphed kernel carries args.module): 1 trace, 4 graphed kernels in 2 replays"
    )
    assert first_line(bare) == (
        "cgfast summary by kernel name (no graphed kernel carries args.module or args.name): "
        "1 trace, 4 graphed kernels in 2 replays"
    )
    report = json.loads(cgfast("summary", bare, "--format", "json").stdout)
    assert report["by"] == "kernel"
    assert {r["value"]: r["kernels"] for r in report["rows"]} == {"gemm": 2, "softmax": 2}
    # A key asked for is kept as it is, with no note: exactly what --by gave before.
    assert (
        first_line(names, "--by", "name")
        == "cgfast summary by args.name: 1 trace, 4 graphed kernels in 2 replays"
    )
    assert (
        first_line(bare, "--by", "module")
        == "cgfast summary by args.module: 1 trace, 4 graphed kernels in 2 replays"
    )
    # Traces that carry the key and traces that do not: the others' kernels are unannotated,
    # as with --by module.
    mixed = json.loads(cgfast("summary", both, names, "--format", "json").stdout)
    explicit = json.loads(cgfast("summary", both, names, "--by", "module", "--format", "json").stdout)
    assert mixed == explicit
    assert {r["value"]: r["kernels"] for r in mixed["rows"]} == {"m.attn": 2, None: 6}
    steps = json.loads(cgfast("summary", both, names, "--steps", "--format", "json").stdout)
    assert steps == json.loads(
        cgfast("summary", both, names, "--steps", "--by", "module", "--format", "json").stdout
    )
    # From Python the default is the same.
    assert cg.summary_report(names)["by"] == "name"
    assert cg.summarize(bare) == report["rows"]


def test_the_icicle_follows_the_key(tmp_path):
    modules = write_trace(tmp_path / "m.annotated.json", events(gemm={"module": "m.attn"}))
    bare = write_trace(tmp_path / "b.annotated.json", events())
    for trace, drawn in ((modules, True), (bare, False)):
        chart = tmp_path / f"{trace.stem}.html"
        assert cgfast("summary", trace, "--chart", chart).returncode == 0
        assert ("hierarchy</text>" in chart.read_text()) is drawn
    assert "GPU time of graph replays by kernel name" in (tmp_path / "b.annotated.html").read_text()


def test_nothing_annotated_is_zero_not_minus_zero(tmp_path):
    bare = write_trace(tmp_path / "bare.annotated.json", events())
    run = cgfast("summary", bare, "--by", "module")
    assert "  annotated      0.0% of busy time" in run.stdout
    assert "-0.0%" not in run.stdout
    report = json.loads(cgfast("summary", bare, "--by", "module", "--format", "json").stdout)
    assert report["totals"]["coverage"] == 0 and math.copysign(1, report["totals"]["coverage"]) == 1
    chart = tmp_path / "c.svg"
    cgfast("summary", bare, "--by", "module", "--chart", chart)
    assert "; 0.0% annotated" in chart.read_text() and "-0.0%" not in chart.read_text()
