"""What scope spans cost: ``cgfast annotate`` with ``--spans none`` and with the default
``--spans module``, side by side on the same trace, runs interleaved.

    python bench/bench_spans.py [--size 200] [--runs 7] [--module-runs 4]

The trace is ``bench/gen_trace.py``'s, with ``--module-runs`` consecutive graph nodes
sharing a module (a compiled model's kernels come in runs of a few per module: the
H200 examples have 0.28-0.30 spans per annotated kernel); ``--module-runs 1`` gives each
node its own module, as in the other benchmarks' traces (the worst case: about two
spans per kernel). Prints each run, the fastest and median of each, the cost of spans
and the peak RSS.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from bench_annotate import cgfast_binary, measure, settle  # noqa: E402
from gen_trace import generate, write_annotations  # noqa: E402


def dataset(size_mb: int, module_runs: int) -> tuple[Path, Path]:
    directory = ROOT / "bench" / "data" / f"{size_mb}mb-modules{module_runs}"
    trace = directory / "trace.json"
    if not trace.exists():
        directory.mkdir(parents=True, exist_ok=True)
        print(f"generating {trace} ...", flush=True)
        annotations, topology = generate(trace.with_suffix(".tmp"), size_mb, module_runs=module_runs)
        trace.with_suffix(".tmp").rename(trace)
        write_annotations(directory, annotations, topology)
    return trace, directory / "kernel_annotations_rank0_1.json"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=200, help="trace size in MB of JSON")
    p.add_argument("--runs", type=int, default=7, help="runs of each case")
    p.add_argument("--module-runs", type=int, default=4, help="consecutive nodes per module")
    a = p.parse_args()
    trace, annotations = dataset(a.size, a.module_runs)
    out = trace.parent / "out.json"
    binary = cgfast_binary()
    argv = [binary, "annotate", str(trace), "-a", str(annotations), "-o", str(out), "--no-progress"]
    report = json.loads(subprocess.run([*argv, "--json"], check=True, capture_output=True, text=True).stdout)
    print(
        f"{trace}: {report['json_bytes'] / 1e6:.0f} MB, {report['annotated']:,} annotated events, {report['spans']:,} spans"
    )
    cases = {"--spans none": ["--spans", "none"], "--spans module": []}
    results: dict[str, list[tuple[float, int]]] = {name: [] for name in cases}
    sizes = {}
    settle([trace, annotations])
    for run in range(a.runs):
        for name, extra in cases.items() if run % 2 == 0 else reversed(cases.items()):
            out.unlink(missing_ok=True)
            settle([])
            results[name].append(measure(argv + extra))
            sizes[name] = out.stat().st_size
    out.unlink(missing_ok=True)
    for name, runs in results.items():
        seconds = [s for s, _ in runs]
        print(
            f"{name:16} fastest {min(seconds):.3f} s, median {statistics.median(seconds):.3f} s, peak RSS {max(r for _, r in runs) / 1e6:.0f} MB, output {sizes[name] / 1e6:.0f} MB; runs {' '.join(f'{s:.3f}' for s in seconds)}"
        )
    base, spans = (results[n] for n in cases)
    fastest = min(s for s, _ in spans) / min(s for s, _ in base) - 1
    median = statistics.median(s for s, _ in spans) / statistics.median(s for s, _ in base) - 1
    print(f"spans add {fastest:+.1%} (fastest runs), {median:+.1%} (median runs)")


if __name__ == "__main__":
    main()
