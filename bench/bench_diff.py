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
(about 48 bytes each), not with the traces' bytes.

    python bench/bench_diff.py [--size-mb 200] [--runs 7] [--json results.json]
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


def annotated_pair(size_mb: float) -> tuple[Path, Path]:
    """``bench/data/diff-<size>mb/{base,test}/trace.annotated.json``, made once."""
    outs = []
    for side, seed in (("base", 0), ("test", 1)):
        directory = ROOT / "bench" / "data" / f"diff-{size_mb:g}mb" / side
        out = directory / "trace.annotated.json"
        if not out.exists():
            directory.mkdir(parents=True, exist_ok=True)
            raw = directory / "trace.json"
            print(f"generating {raw} ...", flush=True)
            annotations, topology = generate(raw.with_suffix(".tmp"), size_mb / ANNOTATED_GROWTH, seed=seed)
            raw.with_suffix(".tmp").rename(raw)
            json_path, _ = write_annotations(directory, annotations, topology)
            done = subprocess.run(
                [
                    cgfast_binary(),
                    "annotate",
                    str(raw),
                    "-a",
                    str(json_path),
                    "-o",
                    str(out),
                    "--no-progress",
                ],
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                sys.exit(f"cgfast annotate failed:\n{done.stderr}")
            raw.unlink()
        outs.append(out)
    return outs[0], outs[1]


def mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def time_pair(base: Path, test: Path, runs: int) -> dict[str, list[Usage]]:
    binary = cgfast_binary()
    commands = {
        "summary": [binary, "summary", str(base), str(test), "--format", "json", "--no-progress"],
        "diff": [binary, "diff", str(base), str(test), "--format", "json", "--no-progress"],
    }
    settle([base, test])
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
    p.add_argument("--json", type=Path, help="also write the figures here")
    a = p.parse_args()
    rows = []
    for size in (a.size_mb, a.size_mb / 2):
        base, test = annotated_pair(size)
        both = base.stat().st_size + test.stat().st_size
        usages = time_pair(base, test, a.runs)
        summary, diff = describe("summary", usages["summary"]), describe("diff", usages["diff"])
        rows.append({"size_mb": size, "bytes": both, "summary": summary, "diff": diff})
    print(
        f"\ncgfast diff vs cgfast summary over the same two annotated traces; {os.cpu_count()} cores, "
        f"{platform.machine()}, {time.strftime('%Y-%m-%d')}, {a.runs} runs each, alternating"
    )
    print(f"{'traces':>16} {'command':>8} {'median':>8} {'fastest':>8} {'CPU':>8} {'peak RSS':>10}")
    for r in rows:
        traces = f"2 x {mb(r['bytes'] / 2)}"
        for name in ("summary", "diff"):
            d = r[name]
            print(
                f"{traces:>16} {name:>8} {d['median_s']:7.2f}s {d['min_s']:7.2f}s "
                f"{d['cpu_median_s']:7.2f}s {mb(d['peak_rss']):>10}"
            )
        ratio = r["diff"]["median_s"] / r["summary"]["median_s"]
        r["ratio"] = ratio
        verdict = "within" if ratio <= TARGET else "OVER"
        print(f"{'':>16} diff / summary: {ratio:.2f}x median ({verdict} the {TARGET}x target)")
    big, small = rows
    print(
        f"peak RSS of diff: {mb(big['diff']['peak_rss'])} at 2 x {mb(big['bytes'] / 2)}, "
        f"{mb(small['diff']['peak_rss'])} at 2 x {mb(small['bytes'] / 2)}"
    )
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
