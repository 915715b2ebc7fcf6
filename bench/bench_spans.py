"""What scope spans cost: ``cgfast annotate`` with ``--spans none`` and with the default
``--spans module``, side by side on the same trace, runs interleaved.

    python bench/bench_spans.py [--models resnet50,llama,...] [--size 200] [--runs 21]
    python bench/bench_spans.py --models synthetic --module-runs 4
    python bench/bench_spans.py --binary path/to/another/cgfast
    python bench/bench_spans.py --busy 2   # with two processes spinning meanwhile

What spans cost is what they add to the output, so it depends on how many there are per
kernel: a model's. Each trace is ``bench/gen_trace.py``'s, with every graph holding the
kernels of a real model in launch order, each labelled with its module
(``bench/model_modules.json``, made by ``bench/model_modules.py``): Inductor-compiled
transformers from ``examples/`` (about 0.3 spans per kernel) and eager timm and Hugging
Face models as ``annotate_modules`` labels them (0.4 to 1.3). ``synthetic`` is the
generator's own labelling, ``--module-runs`` consecutive nodes sharing a module, spread
over two streams (about one span per kernel at 4, two at 1).

The two cases run in pairs, one right after the other, the order alternating. What
spans add is the median over the pairs of how much longer the run with spans took, with
the interval that holds the true median with 95% confidence whatever the distribution
(the sign test's): the pairing takes out the drift of a machine whose speed wanders from
one second to the next. Also printed: each run, the fastest and median of each case,
what spans add to the CPU time (user and system, all threads; median over the pairs)
and the peak RSS.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from bench_annotate import Usage, cgfast_binary, measure_usage, settle  # noqa: E402
from gen_trace import generate, write_annotations  # noqa: E402
from model_modules import load as model_modules  # noqa: E402


def dataset(size_mb: int, model: str, module_runs: int) -> tuple[Path, Path]:
    name = f"modules{module_runs}" if model == "synthetic" else model
    directory = ROOT / "bench" / "data" / f"{size_mb}mb-{name}"
    trace = directory / "trace.json"
    if not trace.exists():
        directory.mkdir(parents=True, exist_ok=True)
        print(f"generating {trace} ...", flush=True)
        modules = None if model == "synthetic" else model_modules()[model]["modules"]
        annotations, topology = generate(
            trace.with_suffix(".tmp"), size_mb, module_runs=module_runs, modules=modules
        )
        # the trace last: it marks the dataset whole
        write_annotations(directory, annotations, topology)
        trace.with_suffix(".tmp").rename(trace)
    return trace, directory / "kernel_annotations_rank0_1.json"


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """The median of `values` and an interval that holds the true median with at least
    `confidence`, whatever the distribution: the order statistics a fair coin puts it
    between (the sign test's interval)."""
    xs = sorted(values)
    n = len(xs)
    # k: the interval runs from the k-th smallest to the k-th largest
    k, below = 0, 0.0
    while k < n // 2:
        tail = math.comb(n, k) / 2**n
        if below + tail > (1 - confidence) / 2:
            break
        below += tail
        k += 1
    low, high = (xs[k - 1], xs[n - k]) if k else (xs[0], xs[-1])
    return statistics.median(xs), low, high


def compare(binary: str, trace: Path, annotations: Path, runs: int) -> str:
    """Run both cases `runs` times, in pairs whose order alternates; a line of what spans add."""
    out = trace.parent / "out.json"
    argv = [binary, "annotate", str(trace), "-a", str(annotations), "-o", str(out), "--no-progress"]
    report = json.loads(subprocess.run([*argv, "--json"], check=True, capture_output=True, text=True).stdout)
    density = report["spans"] / report["annotated"]
    print(
        f"{trace}: {report['json_bytes'] / 1e6:.0f} MB, {report['annotated']:,} annotated events, "
        f"{report['spans']:,} spans ({density:.2f} per annotated event)"
    )
    cases = {"--spans none": ["--spans", "none"], "--spans module": []}
    results: dict[str, list[Usage]] = {name: [] for name in cases}
    sizes = {}
    settle([trace, annotations])
    for run in range(runs):
        for name, extra in cases.items() if run % 2 == 0 else reversed(cases.items()):
            out.unlink(missing_ok=True)
            settle([])
            results[name].append(measure_usage(argv + extra))
            sizes[name] = out.stat().st_size
    out.unlink(missing_ok=True)
    for name, timed in results.items():
        seconds = [u.wall for u in timed]
        print(
            f"  {name:16} fastest {min(seconds):.3f} s, median {statistics.median(seconds):.3f} s, "
            f"CPU median {statistics.median(u.cpu for u in timed):.3f} s, "
            f"peak RSS {max(u.peak_rss for u in timed) / 1e6:.0f} MB, output {sizes[name] / 1e6:.0f} MB; "
            f"runs {' '.join(f'{s:.3f}' for s in seconds)}"
        )
    base, spans = (results[n] for n in cases)
    paired, low, high = median_interval([s.wall / b.wall - 1 for b, s in zip(base, spans)])
    cpu = statistics.median(s.cpu / b.cpu - 1 for b, s in zip(base, spans))
    fastest = min(s.wall for s in spans) / min(b.wall for b in base) - 1
    median = statistics.median(s.wall for s in spans) / statistics.median(b.wall for b in base) - 1
    grown = sizes["--spans module"] / sizes["--spans none"] - 1
    line = (
        f"{paired:+.1%} [{low:+.1%}, {high:+.1%}], CPU {cpu:+.1%}; "
        f"fastest {fastest:+.1%}, median {median:+.1%}; output {grown:+.1%}"
    )
    print(f"  spans add {line}")
    return f"{density:.2f} spans/event: {line}"


@contextlib.contextmanager
def spinning(count: int) -> Iterator[None]:
    """`count` processes that keep a core each busy meanwhile."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=200, help="trace size in MB of JSON")
    p.add_argument("--runs", type=int, default=21, help="runs of each case")
    p.add_argument(
        "--models",
        default=",".join([*model_modules(), "synthetic"]),
        help="comma-separated, of: %(default)s",
    )
    p.add_argument("--module-runs", type=int, default=4, help="synthetic: consecutive nodes per module")
    p.add_argument(
        "--binary", help="the cgfast binary to time (default: target/release/cgfast, else on PATH)"
    )
    p.add_argument(
        "--busy",
        type=int,
        default=0,
        help="processes that spin on a core each while the runs are timed, as on a machine others use",
    )
    a = p.parse_args()
    models = a.models.split(",")
    unknown = [m for m in models if m not in model_modules() and m != "synthetic"]
    if unknown:
        sys.exit(f"unknown models: {', '.join(unknown)}")
    binary = a.binary or cgfast_binary()
    summary = {}
    for model in models:
        trace, annotations = dataset(a.size, model, a.module_runs)
        with spinning(a.busy):
            summary[model] = compare(binary, trace, annotations, a.runs)
    print("\nspans add, side by side:")
    for model, line in summary.items():
        print(f"  {model:22} {line}")


if __name__ == "__main__":
    main()
