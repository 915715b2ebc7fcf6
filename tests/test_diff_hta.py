"""`cgfast diff` against the anchor, Holistic Trace Analysis' `TraceDiff.compare_traces`,
on the same two traces: per kernel name, the counts and total durations agree where both
report them (HTA moves each kernel's start up and its end down to whole microseconds,
so its durations are at most 2 µs per kernel shorter).

HTA compares profiler steps (it refuses traces without `ProfilerStep#` ranges: "Trace
Control doesn't have any iteration"), so the traces are ones profiled with a schedule and
`prof.step()`: those in `tests/data/diff/` (see its README: real traces from a GPU), and
one pair made from the H200 compiled training example (annotated by the CLI, with a
`ProfilerStep#` range added around each training step; the test side's `layers.1.fc1`
kernels 30% longer). `scripts/test` installs HTA; locally the test skips without it."""

from __future__ import annotations

import collections
import json
import os
import shutil
import warnings
from pathlib import Path

import pytest

from helpers import load_json
from trace_files import cgfast

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "h200-compiled-training"
DATA = ROOT / "tests" / "data" / "diff"


@pytest.fixture(scope="module")
def trace_diff():
    try:
        from hta.trace_diff import DeviceType, LabeledTrace, TraceDiff
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI installs holistictraceanalysis (scripts/test), but it is absent", pytrace=False)
        pytest.skip("holistictraceanalysis is not installed (pip install holistictraceanalysis 'pandas<3')")
    return TraceDiff, LabeledTrace, DeviceType


def example_pair(tmp_path: Path) -> tuple[Path, Path]:
    """The compiled training example, annotated, a ProfilerStep range per training step
    (from its optimizer's zero_grad to the end of its step); the test side with the
    kernels of layers.1.fc1 30% longer. Each in a folder of its own, as HTA reads them."""
    annotated = tmp_path / "train.annotated.json"
    run = cgfast(
        "annotate",
        EXAMPLE / "000000.h200.pt.trace.json.gz",
        "-a",
        EXAMPLE / "kernel_annotations_rank0_417.json",
        "-o",
        annotated,
        "--no-progress",
    )
    assert run.returncode == 0, run.stderr
    trace = load_json(annotated)
    events = trace["traceEvents"]
    cpu = [e for e in events if e.get("cat") == "user_annotation"]
    starts = [e for e in cpu if str(e.get("name", "")).startswith("Optimizer.zero_grad")]
    ends = [e for e in cpu if str(e.get("name", "")).startswith("Optimizer.step#")]
    assert len(starts) == len(ends) == 3
    for step, (first, last) in enumerate(zip(starts, ends), start=1):
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": first["pid"],
                "tid": first["tid"],
                "ts": first["ts"] - 1,
                "dur": round(last["ts"] + last["dur"] - first["ts"] + 2, 3),
                "args": {"External id": 900_000 + step},
            }
        )
    base, test = tmp_path / "example_base", tmp_path / "example_test"
    base.mkdir()
    test.mkdir()
    (base / "rank0.annotated.json").write_text(json.dumps(trace))
    for e in events:
        if e.get("cat") == "kernel" and str(e.get("args", {}).get("module", "")).startswith("layers.1.fc1"):
            e["dur"] = round(e["dur"] * 1.3, 3)
    (test / "rank0.annotated.json").write_text(json.dumps(trace))
    return base, test


def real_pairs() -> list[tuple[str, str]]:
    """(base, test) file names in tests/data/diff/ from its `pairs.json`."""
    manifest = DATA / "pairs.json"
    return [tuple(p) for p in json.loads(manifest.read_text())] if manifest.exists() else []


@pytest.fixture(params=["example", *(f"{b}-vs-{t}" for b, t in real_pairs())])
def pair(request, tmp_path):
    if request.param == "example":
        return example_pair(tmp_path)
    base_name, test_name = request.param.split("-vs-")
    dirs = []
    for side, name in (("base", base_name), ("test", test_name)):
        d = tmp_path / side
        d.mkdir()
        shutil.copy(DATA / name, d / name)
        dirs.append(d)
    return tuple(dirs)


def hta_by_name(trace_diff, base: Path, test: Path):
    TraceDiff, LabeledTrace, DeviceType = trace_diff
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        control = LabeledTrace("control", trace_dir=str(base))
        changed = LabeledTrace("test", trace_dir=str(test))
        return TraceDiff.compare_traces(
            control,
            changed,
            control_iteration=control.iterations(),
            test_iteration=changed.iterations(),
            device_type=DeviceType.GPU,
        )


def cgfast_by_name(report) -> dict:
    """Per kernel name over every value: [base kernels, base µs, test kernels, test µs]."""
    totals: dict = collections.defaultdict(lambda: [0, 0.0, 0, 0.0])
    for row in report["rows"]:
        for k in row["kernels"]["names"]:
            t = totals[k["name"]]
            t[0] += k["base_kernels"]
            t[1] += k["base_total_us"]
            t[2] += k["test_kernels"]
            t[3] += k["test_total_us"]
    return totals


def test_counts_and_durations_per_kernel_name_agree_with_hta(trace_diff, pair):
    base, test = pair
    hta = hta_by_name(trace_diff, base, test)
    run = cgfast("diff", base, test, "--by", "name", "--format", "json")
    assert run.returncode == 0, run.stderr
    ours = cgfast_by_name(json.loads(run.stdout))
    assert ours, "cgfast found no graphed kernels"
    # HTA reports every GPU event of the steps (eager kernels, cgfast's scope spans) too;
    # every graphed kernel cgfast reports is among them.
    assert set(ours) <= set(hta.index), sorted(set(ours) - set(hta.index))[:5]
    for name, (bk, bus, tk, tus) in ours.items():
        h = hta.loc[name]
        assert (h["control_counts"], h["test_counts"]) == (bk, tk), name
        for ours_us, theirs_us, count in (
            (bus, h["control_total_duration"], bk),
            (tus, h["test_total_duration"], tk),
        ):
            assert -1e-6 <= ours_us - theirs_us <= 2 * count + 1e-6, (name, ours_us, theirs_us, count)
    # --by kernel gives a row per kernel name, the same kernels
    by_kernel = json.loads(cgfast("diff", base, test, "--by", "kernel", "--format", "json").stdout)
    assert {r["value"] for r in by_kernel["rows"]} == set(ours)
    # What cgfast adds, on these traces (shown with pytest -s): which module changed, by
    # how much per replay, and how sure that is.
    by_module = json.loads(cgfast("diff", base, test, "--format", "json").stdout)
    changed_names = hta[hta["diff_duration"].abs() > 1].sort_values("diff_duration")
    print(f"\nHTA: {len(changed_names)} kernel names whose total duration changed by more than 1 µs")
    for name, h in changed_names.head(5).iterrows():
        print(f"  {name[:70]}: {h['diff_duration']:+.1f} µs over {h['control_counts']:.0f} kernels")
    print(f"cgfast diff (by {by_module['by']}, {by_module['base']['replays']} replays a side):")
    for r in by_module["rows"][:5]:
        print(f"  {r['value']}: {r['verdict']}, {r['delta_us']:+.2f} µs per replay, interval {r['ci_us']}")


def test_the_example_pair_names_the_module_that_changed(trace_diff, tmp_path):
    base, test = example_pair(tmp_path)
    report = json.loads(cgfast("diff", base, test, "--format", "json").stdout)
    assert report["by"] == "module" and report["graphs"] == 2  # a forward and a backward graph
    rows = {r["value"]: r for r in report["rows"]}
    # The GEMM that layers.1.fc1 runs is also run by every other Linear: HTA can only say
    # that kernel name's total grew; cgfast says which module, per replay.
    # (its kernels run 30% longer, into the next kernels' time, which attribution splits)
    fc1 = rows["layers.1.fc1"]
    assert fc1["delta_pct"] > 5 and fc1["by_graph"]
    assert report["rows"][0]["value"] == "layers.1.fc1"
    assert all(abs(r["delta_pct"] or 0) < 1 for v, r in rows.items() if not str(v).startswith("layers.1"))
    # three steps a side are too few for a 95% interval of a graph's shift: no verdict
    assert fc1["ci_us"] == [None, None] and fc1["verdict"] == "same"
