"""How far ``cgfast annotate`` is from the floor: ``cp`` of the same plain trace, side by
side in one run.

    python bench/bench_floor.py [--sizes 200,1000] [--runs 9]
    python bench/bench_floor.py --baseline path/to/another/cgfast   # two builds against cp

On each plain trace of the two shapes the other benches make (``model``: bench_annotate's,
mostly graphed kernels of many modules, about two spans per kernel; ``span per kernel``:
bench_spans' synthetic one, ``--module-runs 4``), each round runs ``cp TRACE OUT`` and
``cgfast annotate TRACE -o OUT`` with its default ``--spans module`` (and, with
``--baseline``, the other build), one right after the other, the order rotating from round
to round. Before each run the output is deleted and ``sync`` flushes what the run before
wrote, so that none pays for another's write-back; the input stays in the page cache.

Printed per shape: each case's median and fastest run and peak RSS, and the ratio that
counts, cgfast's time over cp's: the median over the rounds of the ratio within a round
(runs next to each other meet the same stretch of a machine whose speed drifts), with the
sign test's 95% interval.

``--phases`` says where each build's time goes instead: runs with ``CGFAST_TIMING=1``
(the builds alternating) and the median of each phase's wall and CPU time, from the
marks the run prints: reading and indexing the trace (``scanned``), the passes
(``passes done``), writing the trace out with its edits (``copied``), the scope spans
left to find, format and write, and the output's flush (``rewritten``), and the rest
(committing the output, the report, the process's exit).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import bench_annotate  # noqa: E402
import bench_spans  # noqa: E402
from bench_annotate import Usage, cgfast_binary, measure_usage, settle  # noqa: E402
from bench_spans import median_interval  # noqa: E402

SHAPES = ("model", "span per kernel")


def dataset(shape: str, size_mb: int) -> tuple[Path, Path]:
    """(plain trace, JSON annotations) of `shape`, generated once."""
    if shape == "model":
        trace, annotations, _ = bench_annotate.dataset(size_mb, node_ids=True)
        return trace, annotations
    return bench_spans.dataset(size_mb, "synthetic", 4)


def compare(trace: Path, annotations: Path, builds: dict[str, str], runs: int) -> dict[str, list[Usage]]:
    """`runs` rounds of cp and each build, order rotating; each case's runs."""
    out = trace.parent / "floor-out.json"
    argvs = {"cp": ["cp", str(trace), str(out)]}
    for name, binary in builds.items():
        argvs[name] = [
            binary,
            "annotate",
            str(trace),
            "-a",
            str(annotations),
            "-o",
            str(out),
            "--no-progress",
        ]
    results: dict[str, list[Usage]] = {name: [] for name in argvs}
    names = list(argvs)
    settle([trace, annotations])
    for run in range(runs):
        shift = run % len(names)
        for name in names[shift:] + names[:shift]:
            out.unlink(missing_ok=True)
            settle([])
            results[name].append(measure_usage(argvs[name]))
    out.unlink(missing_ok=True)
    return results


def report(shape: str, trace: Path, results: dict[str, list[Usage]]) -> list[str]:
    print(f"\n{shape}: {trace} ({trace.stat().st_size / 1e6:.0f} MB)")
    for name, timed in results.items():
        seconds = [u.wall for u in timed]
        print(
            f"  {name:10} median {statistics.median(seconds):.3f} s, fastest {min(seconds):.3f} s, "
            f"CPU median {statistics.median(u.cpu for u in timed):.3f} s, "
            f"peak RSS {max(u.peak_rss for u in timed) / 1e6:.0f} MB; runs {' '.join(f'{s:.3f}' for s in seconds)}"
        )
    lines = []
    for name, timed in results.items():
        if name == "cp":
            continue
        ratio, low, high = median_interval([c.wall / p.wall for c, p in zip(timed, results["cp"])])
        line = f"{shape:16} {name:10} / cp: {ratio:.2f}x [{low:.2f}, {high:.2f}]"
        print(f"  {line}")
        lines.append(line)
    return lines


# (phase, the mark that ends it); the last phase ends with the process
PHASES = [
    ("read + index", "scanned"),
    ("passes", "passes done"),
    ("write the trace", "copied"),
    ("spans + flush", "rewritten"),
    ("commit + exit", None),
]


def phase_times(argv: list[str]) -> dict[str, tuple[float, float]]:
    """(wall, CPU) seconds of each of `PHASES` in one run with ``CGFAST_TIMING=1``."""
    env = dict(os.environ, CGFAST_TIMING="1")
    usage_before, started = os.times(), time.perf_counter()
    child = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    usage_after, wall = os.times(), time.perf_counter() - started
    marks = {}
    for line in child.stderr.splitlines():
        # cgfast timing: WHAT at W s, C s of CPU, ...
        if line.startswith("cgfast timing: "):
            what, rest = line[len("cgfast timing: ") :].split(" at ", 1)
            at, cpu = rest.split(" s, ", 1)
            marks[what] = (float(at), float(cpu.split(" s of CPU", 1)[0]))
    total_cpu = (usage_after.children_user + usage_after.children_system) - (
        usage_before.children_user + usage_before.children_system
    )
    end = (wall, total_cpu)
    times, previous = {}, (0.0, 0.0)
    for phase, mark in PHASES:
        here = marks[mark] if mark else end
        times[phase] = (here[0] - previous[0], here[1] - previous[1])
        previous = here
    return times


def phases(trace: Path, annotations: Path, builds: dict[str, str], runs: int) -> None:
    out = trace.parent / "floor-out.json"
    settle([trace, annotations])
    results: dict[str, list[dict[str, tuple[float, float]]]] = {name: [] for name in builds}
    names = list(builds)
    for run in range(runs):
        for name in names if run % 2 == 0 else names[::-1]:
            out.unlink(missing_ok=True)
            settle([])
            argv = [builds[name], "annotate", str(trace), "-a", str(annotations), "-o", str(out)]
            results[name].append(phase_times([*argv, "--no-progress"]))
    out.unlink(missing_ok=True)
    print(f"\n{trace} ({trace.stat().st_size / 1e6:.0f} MB): median of {runs} runs, wall / CPU seconds")
    print(f"  {'phase':18}" + "".join(f"{name:>22}" for name in names))
    for phase, _ in PHASES:
        cells = []
        for name in names:
            wall = statistics.median(r[phase][0] for r in results[name])
            cpu = statistics.median(r[phase][1] for r in results[name])
            cells.append(f"{wall:.3f} / {cpu:.3f}")
        print(f"  {phase:18}" + "".join(f"{cell:>22}" for cell in cells))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="200", help="trace sizes in MB of JSON (comma separated)")
    p.add_argument("--runs", type=int, default=9, help="rounds (each runs every case once)")
    p.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated, of: %(default)s")
    p.add_argument(
        "--binary", help="the cgfast binary to time (default: target/release/cgfast, else on PATH)"
    )
    p.add_argument("--baseline", help="another cgfast binary, timed in the same rounds")
    p.add_argument("--phases", action="store_true", help="where each build's time goes, instead of cp")
    a = p.parse_args()
    shapes = a.shapes.split(",")
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        sys.exit(f"unknown shapes: {', '.join(unknown)}")
    builds = {"cgfast": a.binary or cgfast_binary()}
    if a.baseline:
        builds["baseline"] = a.baseline
    summary = []
    for size in (int(s) for s in a.sizes.split(",")):
        for shape in shapes:
            trace, annotations = dataset(shape, size)
            if a.phases:
                phases(trace, annotations, builds, a.runs)
            else:
                summary += report(shape, trace, compare(trace, annotations, builds, a.runs))
    if a.phases:
        return
    print("\nmedian over rounds of the time over cp's [sign test's 95% interval]:")
    for line in summary:
        print(f"  {line}")
    print(f"machine: {os.cpu_count()} cores; " + "; ".join(f"{n}: {b}" for n, b in builds.items()))


if __name__ == "__main__":
    main()
