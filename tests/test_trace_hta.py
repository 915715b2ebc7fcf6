"""A real consumer reads the scope spans: Holistic Trace Analysis'
``get_gpu_user_annotation_breakdown`` reports time per module of an annotated
``torch.compile`` trace (on a plain trace it finds no GPU user annotation in the graph
replays). ``scripts/test`` installs HTA; locally the test skips without it."""

from __future__ import annotations

import collections
import os
import warnings
from pathlib import Path

import pytest

from helpers import load_json, run_cli

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "examples" / "h200-compiled-transformer" / "000000.h200.pt.trace.json.gz"


@pytest.fixture(scope="module")
def trace_analysis():
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI installs holistictraceanalysis (scripts/test), but it is absent", pytrace=False)
        pytest.skip("holistictraceanalysis is not installed (pip install holistictraceanalysis 'pandas<3')")
    return TraceAnalysis


def breakdown(trace_analysis, directory: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analysis = trace_analysis(trace_dir=str(directory))
        return analysis.get_gpu_user_annotation_breakdown(
            visualize=False, duration_ratio=1.0, num_kernels=100_000
        )


def test_hta_reports_time_per_module(trace_analysis, tmp_path):
    out = tmp_path / "annotated"
    out.mkdir()
    proc = run_cli("annotate", TRACE, "-o", out / "rank0.json.gz", "--no-progress")
    assert proc.returncode == 0, proc.stderr
    frame = breakdown(trace_analysis, out)
    assert frame is not None, "HTA found no GPU user annotation"
    reported = {row["name"]: row["sum (us)"] for _, row in frame.iterrows()}

    # independently, from the graphed work: per replay, each module (and each dotted prefix)
    # runs from its first kernel's start to its last kernel's end, and its kernels alone
    # are busy for the sum of their durations; its spans lie between the two (where its
    # kernels are interleaved with others', as fc1's and fc2's are, it has several spans)
    events = load_json(out / "rank0.json.gz")["traceEvents"]
    extent = collections.defaultdict(lambda: [float("inf"), float("-inf")])
    busy = collections.defaultdict(float)
    kernels = collections.defaultdict(int)
    for e in events:
        args = e.get("args") if isinstance(e, dict) else None
        if (
            e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")
            or not isinstance(args, dict)
            or "module" not in args
            or not args.get("graph node id")
        ):
            continue
        parts = args["module"].split(".")
        for depth in range(1, len(parts) + 1):
            module = ".".join(parts[:depth])
            span = extent[(module, args["correlation"])]
            span[0] = min(span[0], e["ts"])
            span[1] = max(span[1], e["ts"] + e["dur"])
            busy[module] += e["dur"]
            kernels[module] += 1
    outer = collections.defaultdict(float)
    replays = collections.defaultdict(int)
    for (module, _), (start, end) in extent.items():
        outer[module] += end - start
        replays[module] += 1
    modules = set(outer)
    assert {"layers", "layers.0", "layers.0.attn", "layers.1.fc2", "head"} <= modules
    assert modules <= set(reported), f"modules HTA does not report: {sorted(modules - set(reported))}"
    for module in modules:
        # HTA moves each start up and each end down to whole microseconds
        assert busy[module] - 2 * kernels[module] <= reported[module] <= outer[module] + 1e-6, (
            module,
            reported[module],
            busy[module],
            outer[module],
        )
    for module in ("layers", "layers.0", "layers.1", "head"):
        # one run per replay: its span is its extent
        assert abs(reported[module] - outer[module]) <= 2 * replays[module], (
            module,
            reported[module],
            outer[module],
        )


def test_without_spans_hta_finds_nothing_in_the_replays(trace_analysis, tmp_path):
    out = tmp_path / "plain"
    out.mkdir()
    proc = run_cli("annotate", TRACE, "-o", out / "rank0.json.gz", "--no-progress", "--spans", "none")
    assert proc.returncode == 0, proc.stderr
    frame = breakdown(trace_analysis, out)
    names = set() if frame is None else set(frame["name"])
    assert not any(n.startswith("layers") for n in names), names
