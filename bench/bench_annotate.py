#!/usr/bin/env python3
"""cgfast against the reference, side by side in one run.

For each size (default ~200 MB and ~1 GB of JSON) it generates a synthetic Kineto trace
with ``bench/gen_trace.py`` (kept in ``bench/data/``), then runs, on the plain file and on
its gzip:

* the reference: PyTorch 2.13.0's ``torch/cuda/_annotate_cuda_graph_trace.py`` run as a
  script (standard library only; fetched by ``tools/torch_reference.py``), annotations
  from the pickle it reads;
* ``cgfast annotate`` (the release binary), annotations from cgfast's JSON, with
  ``--spans none`` so that both write the same output (``--spans module``, cgfast's
  default, adds scope spans the reference does not write: on these traces, where every
  kernel has a module of its own, about two spans per kernel, the worst case;
  ``bench/bench_spans.py`` measures spans on traces shaped like real ones).

and prints wall time, peak RSS and MB/s (of decompressed JSON) for both, and the ratios.
Inputs are flushed and read into the page cache before each case; cgfast's figure is the
fastest of ``--runs`` runs (half before the reference's one run, half after; the median
is printed too).
A third row per size measures node-id recovery: the same trace written without
``graph node id`` (as torch <= 2.12 writes it) and annotated from the recorded topology.

``--baseline OTHER_BINARY`` times another build of cgfast side by side with this one
(``--binary``, default the release build): in each case their runs alternate, one
right after the other, and the table gains each case's baseline median and how much
slower or faster this build's median is. ``--no-reference`` leaves the reference out.

    python bench/bench_annotate.py [--sizes 200,1000] [--json results.json]
    python bench/bench_annotate.py --sizes 200 --runs 11 --no-reference --baseline /path/to/main/cgfast
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tools"))

from gen_trace import generate, write_annotations  # noqa: E402
from torch_reference import reference_path  # noqa: E402


def cgfast_binary() -> str:
    built = ROOT / "target" / "release" / "cgfast"
    if built.exists():
        return str(built)
    found = shutil.which("cgfast")
    if found is None:
        sys.exit("build the binary first: cargo build --release")
    return found


class Usage(NamedTuple):
    """What one run took."""

    wall: float
    """Seconds."""
    cpu: float
    """Seconds of CPU, user and system, on all its threads."""
    peak_rss: int
    """Bytes."""


def measure_usage(argv: list[str]) -> Usage:
    """What one run took; its output is discarded."""
    started = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - started
    err = child.stderr.read().decode(errors="replace") if child.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{argv[0]} failed:\n{err}")
    return Usage(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024)


def measure(argv: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one run; its output is discarded."""
    usage = measure_usage(argv)
    return usage.wall, usage.peak_rss


def dataset(size_mb: int, node_ids: bool) -> tuple[Path, Path, Path]:
    """(trace, json annotations, pickle annotations), generated once."""
    directory = ROOT / "bench" / "data" / f"{size_mb}mb{'' if node_ids else '-noids'}"
    trace = directory / "trace.json"
    if not trace.exists():
        directory.mkdir(parents=True, exist_ok=True)
        print(f"generating {trace} ...", flush=True)
        annotations, topology = generate(trace.with_suffix(".tmp"), size_mb, node_ids=node_ids)
        trace.with_suffix(".tmp").rename(trace)
        write_annotations(directory, annotations, topology)
    gz = trace.with_name("trace.json.gz")
    if not gz.exists():
        with open(trace, "rb") as src, gzip.open(gz.with_suffix(".tmp"), "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        gz.with_suffix(".tmp").rename(gz)
    return trace, directory / "kernel_annotations_rank0_1.json", directory / "kernel_annotations_rank0_1.pkl"


def settle(paths: list[Path]) -> None:
    """Flush what earlier steps wrote and read the inputs once, so that every run finds
    them in the page cache and none pays for another's write-back."""
    os.sync()
    for path in paths:
        with open(path, "rb") as f:
            while f.read(1 << 24):
                pass


def timed_runs(argv: list[str], output: Path, runs: int) -> list[tuple[float, int]]:
    """(wall seconds, peak RSS) of `runs` runs, each writing a fresh output."""
    results = []
    for _ in range(runs):
        output.unlink(missing_ok=True)
        os.sync()
        results.append(measure(argv))
    return results


def run_pair(
    trace: Path,
    ann_json: Path,
    ann_pkl: Path,
    json_bytes: int,
    reference: str,
    with_reference: bool,
    runs: int,
    spans: str,
    binary: str,
    baseline: str | None,
) -> dict:
    out_dir = trace.parent / "out"
    out_dir.mkdir(exist_ok=True)
    suffix = ".json.gz" if trace.name.endswith(".gz") else ".json"
    row = {"input": trace.name, "input_mb": trace.stat().st_size / 1e6, "json_mb": json_bytes / 1e6}
    settle([trace, ann_json, ann_pkl])
    ours = out_dir / f"cgfast{suffix}"

    def argv_of(build: str) -> list[str]:
        return [
            build,
            "annotate",
            str(trace),
            "-a",
            str(ann_json),
            "-o",
            str(ours),
            "--no-progress",
            "--spans",
            spans,
        ]

    ours_argv = argv_of(binary)
    if baseline is not None:
        # the two builds alternate (which goes first alternates too), so that both meet
        # the same stretch of a machine whose speed drifts
        results, base_results = [], []
        for k in range(runs):
            pair = [(ours_argv, results), (argv_of(baseline), base_results)]
            for argv, into in pair if k % 2 == 0 else pair[::-1]:
                into += timed_runs(argv, ours, 1)
        ours.unlink(missing_ok=True)
        row["baseline_s"], row["baseline_rss"] = min(base_results)
        row["baseline_median_s"] = statistics.median(seconds for seconds, _ in base_results)
        row["baseline_runs_s"] = [seconds for seconds, _ in base_results]
        with_reference = False
    # cgfast's runs go half before and half after the reference's, so that both meet the
    # same stretch of a machine whose speed drifts
    before = (runs + 1) // 2 if with_reference else runs
    if baseline is None:
        results = timed_runs(ours_argv, ours, before)
    if with_reference:
        theirs = out_dir / f"reference{suffix}"
        row["reference_s"], row["reference_rss"] = timed_runs(
            [sys.executable, reference, str(trace), "-a", str(ann_pkl), "-o", str(theirs)], theirs, 1
        )[0]
        theirs.unlink(missing_ok=True)
        settle([trace, ann_json])
        results += timed_runs(ours_argv, ours, runs - before)
    ours.unlink(missing_ok=True)
    row["cgfast_s"], row["cgfast_rss"] = min(results)
    row["cgfast_median_s"] = statistics.median(seconds for seconds, _ in results)
    row["cgfast_runs_s"] = [seconds for seconds, _ in results]
    return row


def mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def print_against_reference(rows: list[dict]) -> None:
    print(f"{'case':<28} {'reference':>22} {'cgfast':>32} {'speed-up':>9} {'median':>7} {'memory':>8}")
    for r in rows:
        ours = f"{r['cgfast_s']:6.2f} s {mb(r['cgfast_rss']):>9} {r['json_mb'] / r['cgfast_s']:6.0f} MB/s"
        if "reference_s" in r:
            theirs = f"{r['reference_s']:6.2f} s {mb(r['reference_rss']):>9}"
            ratio = f"{r['reference_s'] / r['cgfast_s']:8.1f}x {r['reference_s'] / r['cgfast_median_s']:6.1f}x {r['reference_rss'] / r['cgfast_rss']:7.1f}x"
        elif "overhead" in r:
            theirs = f"{'(no ids: annotates nothing)':>22}"
            ratio = f"  recovery adds {r['overhead'] * 100:+.0f}% per byte"
        else:
            theirs, ratio = f"{'(not run)':>22}", ""
        print(f"{r['case']:<28} {theirs:>22} {ours:>32} {ratio}")
    print("\nspeed-up: reference time / cgfast's fastest run (median: / its median run);")
    print("memory: reference peak RSS / cgfast peak RSS. cgfast's runs, in seconds:")
    for r in rows:
        print(f"  {r['case']:<28} {' '.join(f'{t:.2f}' for t in r['cgfast_runs_s'])}")


def print_side_by_side(rows: list[dict]) -> None:
    # (a function's import: bench_spans imports this module)
    from bench_spans import median_interval

    print(f"{'case':<28} {'this build':>30} {'baseline':>30} {'per pair':>9} {'95% interval':>17}")
    for r in rows:
        ours = f"{r['cgfast_s']:6.3f} s / {r['cgfast_median_s']:6.3f} s {mb(r['cgfast_rss']):>9}"
        base = f"{r['baseline_s']:6.3f} s / {r['baseline_median_s']:6.3f} s {mb(r['baseline_rss']):>9}"
        # the runs of a pair ran one right after the other: their ratio leaves out how
        # the machine's speed drifted over the whole
        ratios = [a / b - 1 for a, b in zip(r["cgfast_runs_s"], r["baseline_runs_s"])]
        median, low, high = median_interval(ratios)
        interval = f"[{low * 100:+.1f}%, {high * 100:+.1f}%]"
        print(f"{r['case']:<28} {ours:>30} {base:>30} {median * 100:+8.1f}% {interval:>17}")
    print(
        "\neach: fastest / median run, peak RSS; per pair: the median over pairs of runs (one right after"
        "\nthe other, the order alternating) of this build's time over the baseline's, with the sign"
        "\ntest's 95% interval. Runs, in seconds:"
    )
    for r in rows:
        print(f"  {r['case']:<28} this build {' '.join(f'{t:.3f}' for t in r['cgfast_runs_s'])}")
        print(f"  {'':<28} baseline   {' '.join(f'{t:.3f}' for t in r['baseline_runs_s'])}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="200,1000", help="trace sizes in MB of JSON (comma separated)")
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument(
        "--runs",
        type=int,
        default=3,
        help="cgfast runs per case (the fastest counts; the reference runs once)",
    )
    p.add_argument(
        "--spans",
        default="none",
        help="cgfast's --spans (default none: the reference's output; module: cgfast's default)",
    )
    p.add_argument(
        "--binary", help="the cgfast binary to time (default: target/release/cgfast, else on PATH)"
    )
    p.add_argument("--baseline", help="another cgfast binary, timed side by side with --binary")
    p.add_argument("--no-reference", action="store_true", help="do not run the reference")
    a = p.parse_args()
    binary = a.binary or cgfast_binary()
    with_reference = not a.no_reference and a.baseline is None
    reference = str(reference_path()) if with_reference else ""
    sizes = [int(s) for s in a.sizes.split(",")]
    datasets = {(size, ids): dataset(size, node_ids=ids) for size in sizes for ids in (True, False)}
    rows = []
    for size in sizes:
        trace, ann_json, ann_pkl = datasets[(size, True)]
        json_bytes = trace.stat().st_size
        for path in (trace, trace.with_name("trace.json.gz")):
            rows.append(
                {
                    "case": f"{size} MB {'gzip' if path.suffix == '.gz' else 'plain'}",
                    **run_pair(
                        path,
                        ann_json,
                        ann_pkl,
                        json_bytes,
                        reference,
                        with_reference,
                        a.runs,
                        a.spans,
                        binary,
                        a.baseline,
                    ),
                }
            )
        ids = rows[-2]
        noids_trace, noids_json, noids_pkl = datasets[(size, False)]
        recovered = run_pair(
            noids_trace,
            noids_json,
            noids_pkl,
            noids_trace.stat().st_size,
            reference,
            False,
            a.runs,
            a.spans,
            binary,
            a.baseline,
        )
        rows.append(
            {
                "case": f"{size} MB plain, ids recovered",
                **recovered,
                "overhead": recovered["cgfast_s"]
                / ids["cgfast_s"]
                * (json_bytes / noids_trace.stat().st_size)
                - 1,
            }
        )

    print()
    if a.baseline is not None:
        print_side_by_side(rows)
        print(
            f"machine: {os.cpu_count()} cores; this build: {binary}; baseline: {a.baseline}; --spans {a.spans}"
        )
    else:
        print_against_reference(rows)
        print(
            f"machine: {os.cpu_count()} cores; reference: {reference or '(not run)'}; cgfast --spans {a.spans}"
        )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
