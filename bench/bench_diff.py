#!/usr/bin/env python3
"""``cgfast diff`` against ``cgfast summary`` over the same two traces, side by side in
one run.

Generates two synthetic Kineto traces with ``bench/gen_trace.py`` (seeds 0 and 1: the
same module paths, different kernels and times; kept in ``bench/data/``) and annotates
them with ``cgfast annotate`` into traces of about ``--size-mb`` MB each (annotating
adds about half again: scope spans, lanes), then times,
alternating which goes first, ``--runs`` runs each of

* ``cgfast summary BASE TEST --format json`` (both traces, added up), and
* ``cgfast diff BASE TEST --format json`` (the same two traces compared),

both with their default key (``module``) and threads (one per core), output discarded.
Prints the median and fastest wall time, CPU time and peak RSS of each, and diff's
median over summary's (the target: at most 1.2). A second pair of traces of half the
size shows how peak memory grows: with the graphed kernels of the traces being read
(about 48 bytes each), not with the traces' bytes. A third case splits each side into
``--runs-a-side`` traces (runs: separate processes) of ``--size-mb`` over that many MB
each, so that every value's interval is the hierarchical bootstrap between runs.

    python bench/bench_diff.py [--size-mb 200] [--runs 7] [--runs-a-side 4] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_annotate import Usage, cgfast_binary, measure_usage, settle  # noqa: E402
from gen_trace import generate, write_annotations  # noqa: E402

TARGET = 1.2
# an annotated gen_trace trace is about this many times the size of the trace
ANNOTATED_GROWTH = 1.5


def annotated_pair(size_mb: float) -> tuple[list[Path], list[Path]]:
    """``bench/data/diff-<size>mb/{base,test}/trace.annotated.json``, made once."""
    root = ROOT / "bench" / "data" / f"diff-{size_mb:g}mb"
    return [annotated(root / "base", size_mb, seed=0)], [annotated(root / "test", size_mb, seed=1)]


def annotated_runs(size_mb: float, runs: int) -> tuple[list[Path], list[Path]]:
    """``bench/data/diff-<size>mb-<runs>runs/{base,test}/runK/trace.annotated.json``: each
    side ``runs`` traces of ``size_mb / runs`` MB (seeds 0 to runs - 1 for the base, the
    next ones for the test), made once."""
    root = ROOT / "bench" / "data" / f"diff-{size_mb:g}mb-{runs}runs"
    base = [annotated(root / "base" / f"run{k}", size_mb / runs, seed=k) for k in range(runs)]
    test = [annotated(root / "test" / f"run{k}", size_mb / runs, seed=runs + k) for k in range(runs)]
    return base, test


def annotated(directory: Path, size_mb: float, seed: int) -> Path:
    """``directory/trace.annotated.json``: a gen_trace trace of about ``size_mb`` MB,
    annotated; made once."""
    out = directory / "trace.annotated.json"
    if out.exists():
        return out
    directory.mkdir(parents=True, exist_ok=True)
    raw = directory / "trace.json"
    print(f"generating {raw} ...", flush=True)
    annotations, topology = generate(raw.with_suffix(".tmp"), size_mb / ANNOTATED_GROWTH, seed=seed)
    raw.with_suffix(".tmp").rename(raw)
    json_path, _ = write_annotations(directory, annotations, topology)
    argv = [cgfast_binary(), "annotate", str(raw), "-a", str(json_path), "-o", str(out), "--no-progress"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"cgfast annotate failed:\n{done.stderr}")
    raw.unlink()
    return out


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def time_sides(binary: str, base: list[Path], test: list[Path], runs: int) -> dict[str, list[Usage]]:
    sides = [*(a for b in base for a in ("--base", str(b))), *(a for t in test for a in ("--test", str(t)))]
    commands = {
        "summary": [binary, "summary", *map(str, base + test), "--format", "json", "--no-progress"],
        "diff": [binary, "diff", *sides, "--format", "json", "--no-progress"],
    }
    settle(base + test)
    results: dict[str, list[Usage]] = {name: [] for name in commands}
    for run in range(runs):
        order = ["summary", "diff"] if run % 2 == 0 else ["diff", "summary"]
        for name in order:
            results[name].append(measure_usage(commands[name]))
    return results


def describe(name: str, usages: list[Usage]) -> dict:
    walls = [u.wall for u in usages]
    return {
        "command": name,
        "median_s": statistics.median(walls),
        "min_s": min(walls),
        "cpu_median_s": statistics.median(u.cpu for u in usages),
        "peak_rss": max(u.peak_rss for u in usages),
        "runs_s": walls,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mb", type=float, default=200.0, help="each trace, uncompressed (MB)")
    p.add_argument("--runs", type=int, default=7)
    p.add_argument(
        "--runs-a-side", type=int, default=4, help="traces (runs) a side of the third case (0: none)"
    )
    p.add_argument("--cgfast", help="the binary timed [default: target/release/cgfast, else cgfast on PATH]")
    p.add_argument("--json", type=Path, help="also write the figures here")
    a = p.parse_args()
    binary = a.cgfast or cgfast_binary()
    cases = [(f"{size:g} MB a side", *annotated_pair(size)) for size in (a.size_mb, a.size_mb / 2)]
    if a.runs_a_side > 1:
        cases.append((f"{a.runs_a_side} runs a side", *annotated_runs(a.size_mb, a.runs_a_side)))
    rows = []
    for case, base, test in cases:
        both = sum(p.stat().st_size for p in base + test)
        usages = time_sides(binary, base, test, a.runs)
        summary, diff = describe("summary", usages["summary"]), describe("diff", usages["diff"])
        rows.append(
            {"case": case, "traces": [len(base), len(test)], "bytes": both, "summary": summary, "diff": diff}
        )
    print(
        f"\ncgfast diff vs cgfast summary over the same annotated traces; {os.cpu_count()} cores, "
        f"{platform.machine()}, {time.strftime('%Y-%m-%d')}, {a.runs} runs each, alternating; {binary}"
    )
    print(f"{'traces':>20} {'command':>8} {'median':>8} {'fastest':>8} {'CPU':>8} {'peak RSS':>10}")
    for r in rows:
        sides = r["traces"]
        traces = f"{sides[0]}+{sides[1]} x {mb(r['bytes'] / sum(sides))}"
        for name in ("summary", "diff"):
            d = r[name]
            print(
                f"{traces:>20} {name:>8} {d['median_s']:7.2f}s {d['min_s']:7.2f}s "
                f"{d['cpu_median_s']:7.2f}s {mb(d['peak_rss']):>10}"
            )
        ratio = r["diff"]["median_s"] / r["summary"]["median_s"]
        r["ratio"] = ratio
        verdict = "within" if ratio <= TARGET else "OVER"
        print(f"{'':>20} diff / summary: {ratio:.2f}x median ({verdict} the {TARGET}x target)")
    big, small = rows[:2]
    print(
        f"peak RSS of diff: {mb(big['diff']['peak_rss'])} at 2 x {mb(big['bytes'] / 2)}, "
        f"{mb(small['diff']['peak_rss'])} at 2 x {mb(small['bytes'] / 2)}"
    )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
