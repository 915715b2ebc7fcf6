"""`cgfast diff` with several runs a side: each process places its memory anew, so every
module of a run is a few percent off in its own way, the same in all of that run's
replays. The intervals must hold that spread between runs (a hierarchical bootstrap),
and with one run a side the report must say that they do not."""

from __future__ import annotations

import json
import math
import random
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from test_diff import MODEL, model_events, report_of, rows_by_value, write
from trace_files import cgfast

cg = pytest.importorskip("cgfast")

MODULES = sorted({m for m, _, _ in MODEL if m})
RUNS = 4
REPLAYS = 30
# each run's placement effect on each module: uniform in ±PLACEMENT, fixed for the run
PLACEMENT = 0.02
# per replay: ±0.5% on every kernel
NOISE = 0.01
SLOWER = "model.layers.1.mlp"
REAL = Path(__file__).resolve().parent / "data" / "diff"


def runs(directory: Path, name: str, seed: int, slower: Optional[str] = None) -> List[Path]:
    """RUNS traces (one per process) of the model, each with its own placement effect on
    every module; `slower` 15% slower in all of them."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    paths = []
    for k in range(RUNS):
        scale = {m: 1 + rng.uniform(-PLACEMENT, PLACEMENT) for m in MODULES}
        if slower:
            scale[slower] *= 1.15
        events = model_events(REPLAYS, seed=seed * 100 + k, scale=scale, noise=NOISE)
        paths.append(write(directory / f"{name}{k}.annotated.json", events))
    return paths


def sides(base: List[Path], test: List[Path]) -> List[Any]:
    return [*(a for b in base for a in ("--base", b)), *(a for t in test for a in ("--test", t))]


def changed(report: Dict[str, Any]) -> Dict[Any, str]:
    return {r["value"]: r["verdict"] for r in [*report["rows"], *report["tree"]] if r["verdict"] != "same"}


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """Four runs of the model as base, four more of the same program, four with SLOWER 15% slower."""
    d = tmp_path_factory.mktemp("runs")
    return runs(d / "base", "b", 1), runs(d / "again", "a", 2), runs(d / "slower", "s", 3, slower=SLOWER)


def test_runs_of_the_same_program_flag_nothing(programs):
    base, again, _ = programs
    report = report_of(*sides(base, again), "--fail-if-slower", "5")
    assert report["runs"]["base"] == report["runs"]["test"] == RUNS and report["runs"]["between_runs"]
    assert "hierarchical bootstrap" in report["method"]
    assert changed(report) == {} and report["total"]["verdict"] == "same"
    assert report["gate"]["failed"] is False
    # Each interval is as wide as the placement makes the change: a module's change is
    # a mean of 4 placement effects less a mean of 4 more, σ = PLACEMENT/√3 · √(1/4 + 1/4)
    # of its time. The interval between replays would be a fraction of that (±0.15%).
    sigma = PLACEMENT / math.sqrt(3) * math.sqrt(2 / RUNS)
    for module in MODULES:
        row = rows_by_value(report)[module]
        assert row["runs"] == {"base": RUNS, "test": RUNS}, module
        low, high = row["ci_pct"]
        assert low < 0 < high, module
        assert (high - low) / 2 >= 0.5 * 100 * sigma, (module, row["ci_pct"])
    table = cgfast("diff", *sides(base, again), "--fail-if-slower", "5")
    assert table.returncode == 0, table.stdout
    assert (
        "  runs           4 a side: each interval holds the spread between runs as well as between replays\n"
        in table.stdout
    )
    assert "no value changed" in table.stdout


def test_a_module_slower_in_every_run_is_flagged_alone(programs):
    base, _, slower = programs
    report = report_of(*sides(base, slower), "--fail-if-slower", "5", status=3)
    rows = {r["value"]: r["verdict"] for r in report["rows"] if r["verdict"] != "same"}
    assert rows == {SLOWER: "slower"}
    tree = {r["value"]: r["verdict"] for r in report["tree"] if r["verdict"] != "same"}
    assert tree == dict.fromkeys([SLOWER, "model.layers.1", "model.layers", "model"], "slower")
    row = rows_by_value(report)[SLOWER]
    assert row["delta_pct"] == pytest.approx(15, abs=2.5) and row["ci_pct"][0] > 10
    assert [(o["value"], o["total"]) for o in report["gate"]["offenders"]] == [(SLOWER, False)]
    run = cgfast("diff", *sides(base, slower), "--fail-if-slower", "5")
    assert run.returncode == 3 and run.stderr.startswith(f"cgfast: slower: {SLOWER} +")


def test_one_run_a_side_says_run_to_run_variation_is_not_in_the_intervals(programs, tmp_path):
    base, again, _ = programs
    table = cgfast("diff", base[0], again[0])
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    note = [line for line in lines if line.startswith("  runs ")]
    assert note == [
        "  runs           1 a side: run-to-run variation is not in the intervals (they hold the spread"
        " between replays of one process); 2 or more runs a side (traces of separate processes) would"
        " measure it"
    ]
    # the rest is the table as it was: the method line and the total first
    assert lines[1].startswith("  method         the Hodges-Lehmann shift of the times per replay")
    assert lines[2].startswith("  total ")
    report = report_of(base[0], again[0])
    assert report["runs"] == {"base": 1, "test": 1, "between_runs": False, "note": note[0].split(None, 1)[1]}
    assert report["method"].startswith("Hodges-Lehmann") and "runs" not in report["rows"][0]
    # and it matters: each base run against the test run of its number, the interval
    # between replays is sure of changes that are the runs' placement
    fooled = [
        {v for v, verdict in changed(report_of(b, a)).items() if verdict in ("slower", "faster")}
        for b, a in zip(base, again)
    ]
    assert any(fooled), fooled
    # several runs on one side only: still between replays
    uneven = report_of(*sides(base[:1], again))
    assert uneven["runs"]["between_runs"] is False
    assert uneven["runs"]["note"].startswith("base 1, test 4: run-to-run variation is not in the intervals")
    # real GPU traces: a Llama run twice on an H200; some values' intervals between
    # replays lie off 0, though the program is the same
    real = cgfast("diff", REAL / "llama3-base.annotated.json.gz", REAL / "llama3-again.annotated.json.gz")
    assert note[0] in real.stdout.splitlines()
    sure = [
        r["value"]
        for r in report_of(REAL / "llama3-base.annotated.json.gz", REAL / "llama3-again.annotated.json.gz")[
            "rows"
        ]
        if r["ci_us"] and (r["ci_us"][0] > 0 or r["ci_us"][1] < 0)
    ]
    assert sure, "the replays of one process agree more than two processes do"


def test_the_profiling_windows_of_one_process_are_one_run(tmp_path):
    """trace_handler names traces RANK.HOST_PID.NS.pt.trace.json: one worker, one run."""
    windows = [
        write(tmp_path / f"000000.gpu_7.{ns}.pt.trace.annotated.json", model_events(10, seed=ns))
        for ns in (111, 222)
    ]
    other = write(tmp_path / "000000.gpu_8.333.pt.trace.annotated.json", model_events(10, seed=3))
    one = report_of(*sides(windows, [other]))
    assert (one["base"]["traces"], one["runs"]["base"], one["runs"]["between_runs"]) == (2, 1, False)
    two = report_of(*sides([windows[0], other], [*windows[1:], other]))
    assert (two["runs"]["base"], two["runs"]["test"], two["runs"]["between_runs"]) == (2, 2, True)


def test_the_same_traces_give_the_same_report(programs):
    base, again, _ = programs
    first = cgfast("diff", *sides(base, again), "--format", "json")
    assert first.returncode == 0, first.stderr
    assert cgfast("diff", *sides(base, again), "--format", "json").stdout == first.stdout
    # the runs drawn are the same whatever the order the traces are given in, on any
    # number of threads (sums over all replays may differ in their last bits)
    shuffled = cgfast("diff", *sides(base[::-1], again[1:] + again[:1]), "--format", "json", "-j", "1")

    def intervals(report: Dict[str, Any]) -> List[tuple]:
        return [(r["value"], r["verdict"], r["delta_us"], r["ci_us"], r["runs"]) for r in report["rows"]]

    assert intervals(json.loads(shuffled.stdout)) == intervals(json.loads(first.stdout))
    assert cg.diff(base, again) == json.loads(first.stdout)


def test_a_value_in_one_run_of_a_side_keeps_the_interval_between_replays(tmp_path):
    extra = [*MODEL, ("model.extra", "gemm_extra", 12.0)]
    base = [
        write(tmp_path / f"b{k}.annotated.json", model_events(20, seed=k, kernels=extra)) for k in range(2)
    ]
    test = [
        write(tmp_path / "t0.annotated.json", model_events(20, seed=5, kernels=extra)),
        write(tmp_path / "t1.annotated.json", model_events(20, seed=6)),
    ]
    report = report_of(*sides(base, test))
    row = rows_by_value(report)["model.extra"]
    assert row["runs"] == {"base": 2, "test": 1} and row["ci_us"] is not None
    assert rows_by_value(report)["lm_head"]["runs"] == {"base": 2, "test": 2}
    assert report["runs"]["note"].endswith("; 1 value in fewer than 2 runs of a side: between replays")


def test_ranks_pooled_are_runs_and_each_rank_is_compared_on_its_own(tmp_path):
    info = lambda rank: {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}}  # noqa: E731
    traces = {
        side: [
            write(tmp_path / f"{side}{r}.annotated.json", model_events(20, seed=10 * r + s), top=info(r))
            for r in (0, 1)
        ]
        for s, side in enumerate(("b", "t"))
    }
    report = report_of(*sides(traces["b"], traces["t"]), "--per-rank")
    assert report["runs"]["between_runs"] is True
    assert [(r["rank"], r["runs"]["base"], r["runs"]["between_runs"]) for r in report["ranks"]] == [
        (0, 1, False),
        (1, 1, False),
    ]
    table = cgfast("diff", *sides(traces["b"], traces["t"]), "--per-rank").stdout
    assert sum(line.startswith("  runs           1 a side: run-to-run") for line in table.splitlines()) == 2


def test_the_help_says_which_method(programs):
    base, again, _ = programs
    method = report_of(*sides(base, again))["method"]
    resamples = int(re.search(r"(\d+) resamples", method).group(1))
    text = " ".join(cgfast("diff", "--help").stdout.split())
    assert f"hierarchical bootstrap: {resamples:,} resamples" in text
    assert "drawing a side's runs with replacement and then each drawn run's replays" in text


def test_pool_runs_gives_the_report_of_before_runs_were_told_apart(programs):
    """With --pool-runs every trace of a side is of one run: the interval between replays
    and no word of runs, in the table, the JSON and from Python."""
    base, again, _ = programs
    table = cgfast("diff", *sides(base, again), "--all", "--pool-runs", "--no-progress")
    assert table.returncode == 0, table.stderr
    assert "\n  runs " not in table.stdout and "bootstrap" not in table.stdout
    report = report_of(*sides(base, again), "--pool-runs")
    assert "runs" not in report and "Hodges-Lehmann" in report["method"]
    assert all("runs" not in row for row in report["rows"])
    from_python = cg.diff(base, again, pool_runs=True)
    assert "runs" not in from_python and from_python["method"] == report["method"]
