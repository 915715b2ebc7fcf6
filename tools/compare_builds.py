#!/usr/bin/env python3
"""Compare what two builds of ``cgfast`` write, byte for byte (``cmp``), on the
bench-shaped traces (``bench/gen_trace.py`` at ``--size`` MB: with node ids, without,
and with runs of nodes sharing a module), the examples and the real H200 fixtures,
over the option sets the tests use, plain and gzipped, and with ``CGFAST_THREADS=1``;
then what ``cgfast summary`` and ``cgfast diff`` print and chart for the annotated
examples, fixtures and bench trace. A refactoring must leave every output identical.

    python tools/compare_builds.py BASELINE_BINARY CANDIDATE_BINARY [--size 200] [--work DIR]

Exits 1 when any output differs (or one build fails where the other does not).
"""

from __future__ import annotations

import argparse
import filecmp
import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from gen_trace import generate, write_annotations  # noqa: E402

FIXTURES = ROOT.parent / "shared" / "fixtures" / "h200"

# (name, flags, extra environment)
SMALL_OPTIONS = [
    ("default", [], {}),
    ("spans-none", ["--spans", "none"], {}),
    ("spans-scope", ["--spans", "scope"], {}),
    ("lanes-none", ["--lanes", "none"], {}),
    ("lanes-reference", ["--lanes", "reference", "--spans", "none"], {}),
    ("lanes-all", ["--lanes", "all"], {}),
    ("recover-always", ["--recover", "always"], {}),
    ("recover-never", ["--recover", "never"], {}),
    ("topology-only", ["--topology-only"], {}),
    ("streams", ["--default-stream", "20", "--overlap-stream", "21", "--max-adjust-us", "0"], {}),
    ("one-thread", [], {"CGFAST_THREADS": "1"}),
]
LARGE_OPTIONS = [
    ("default", [], {}),
    ("spans-none", ["--spans", "none"], {}),
    ("lanes-none", ["--lanes", "none"], {}),
    ("lanes-reference", ["--lanes", "reference", "--spans", "none"], {}),
    ("one-thread", [], {"CGFAST_THREADS": "1"}),
]
RECOVERY_OPTIONS = [
    ("default", [], {}),
    ("recover-always", ["--recover", "always"], {}),
    ("topology-only", ["--topology-only"], {}),
    ("one-thread", [], {"CGFAST_THREADS": "1"}),
]


def bench_trace(work: Path, name: str, size: int, **shape) -> tuple[Path, Path]:
    """A gen_trace trace (generated once) and its annotation file."""
    directory = work / name
    trace = directory / "trace.json"
    if not trace.exists():
        directory.mkdir(parents=True, exist_ok=True)
        annotations, topology = generate(trace.with_suffix(".tmp"), size, **shape)
        write_annotations(directory, annotations, topology)
        trace.with_suffix(".tmp").rename(trace)
    return trace, directory / "kernel_annotations_rank0_1.json"


def gzipped(trace: Path) -> Path:
    gz = trace.with_name(trace.name + ".gz")
    if not gz.exists():
        with open(trace, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return gz


def fixture_annotations(work: Path, trace: Path) -> Path:
    """Annotations for a fixture (which has none): a module per graphed node, and a
    lane for every third, so that every pass has work."""
    path = work / "fixtures" / f"{trace.name}.annotations.json"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(trace, "rt") as f:
            events = json.load(f)["traceEvents"]
        nodes = sorted(
            {
                e["args"]["graph node id"]
                for e in events
                if isinstance(e, dict) and isinstance(e.get("args"), dict) and e["args"].get("graph node id")
            }
        )
        annotations = {
            str(n): [{"module": f"model.layers.{i % 3}.mlp", **({"stream": 60} if i % 3 == 0 else {})}]
            for i, n in enumerate(nodes)
        }
        path.write_text(
            json.dumps({"format": "cgfast-annotations", "version": 1, "annotations": annotations})
        )
    return path


def run(binary: str, trace: Path, annotations: Path, output: Path, flags: list[str], env: dict) -> int:
    output.unlink(missing_ok=True)
    argv = [
        binary,
        "annotate",
        str(trace),
        "-a",
        str(annotations),
        "-o",
        str(output),
        "--no-progress",
        *flags,
    ]
    return subprocess.run(argv, env={**os.environ, **env}, capture_output=True).returncode


def compare(
    baseline: str, candidate: str, case: str, trace, annotations, options, out_dir: Path
) -> list[str]:
    """Each option set, plain and gzipped output: a line per case."""
    lines = []
    for name, flags, env in options:
        for suffix in (".json", ".json.gz"):
            a, b = out_dir / f"baseline{suffix}", out_dir / f"candidate{suffix}"
            status = (
                run(baseline, trace, annotations, a, flags, env),
                run(candidate, trace, annotations, b, flags, env),
            )
            if status[0] != status[1]:
                verdict = f"DIFFER (exit {status[0]} vs {status[1]})"
            elif status[0] != 0:
                verdict = f"both fail (exit {status[0]})"
            else:
                verdict = "identical" if filecmp.cmp(a, b, shallow=False) else "DIFFER"
            lines.append(f"{case:<44} {name:<16} {suffix:<9} {verdict}")
            print(lines[-1], flush=True)
            a.unlink(missing_ok=True)
            b.unlink(missing_ok=True)
    return lines


SUMMARY_OPTIONS = [
    ("table", []),
    ("csv", ["--format", "csv"]),
    ("json", ["--format", "json"]),
    ("steps", ["--steps", "--format", "csv"]),
    ("steps-json", ["--steps", "--format", "json", "--top", "5"]),
    ("by-kernel", ["--by", "kernel"]),
    ("by-name", ["--by", "name", "--format", "json"]),
    ("depth", ["--depth", "2", "--format", "json"]),
    ("group-layers", ["--group-layers"]),
    ("chart-svg", ["--chart", "{out}/chart.svg"]),
    ("chart-html", ["--chart", "{out}/chart.html", "--no-hierarchy"]),
]
DIFF_OPTIONS = [
    ("table", []),
    ("all", ["--all"]),
    ("csv", ["--format", "csv"]),
    ("json", ["--format", "json"]),
    ("by-kernel", ["--by", "kernel", "--threshold", "0.5"]),
    ("group-layers", ["--group-layers", "--top", "1"]),
    ("gate", ["--fail-if-slower", "1", "--min-share", "0.1"]),
    ("per-rank", ["--per-rank", "--format", "json"]),
    ("chart-svg", ["--chart", "{out}/chart.svg"]),
    ("chart-html", ["--chart", "{out}/chart.html"]),
]


def report(binary: str, command: str, inputs: list[Path], flags: list[str], out: Path) -> tuple:
    """What one report command does: exit status, stdout, stderr and the chart written."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    argv = [binary, command, *map(str, inputs), "--no-progress", *(f.format(out=out) for f in flags)]
    done = subprocess.run(argv, capture_output=True)
    stderr = done.stderr.replace(str(out).encode(), b"OUT")
    charts = {f.name: f.read_bytes() for f in sorted(out.iterdir())}
    return done.returncode, done.stdout, stderr, charts


def compare_reports(
    baseline: str, candidate: str, command: str, case: str, inputs: list[Path], options, out_dir: Path
) -> list[str]:
    """Each option set of ``summary`` or ``diff``: a line per case."""
    lines = []
    for name, flags in options:
        a = report(baseline, command, inputs, flags, out_dir / "baseline-report")
        b = report(candidate, command, inputs, flags, out_dir / "candidate-report")
        verdict = (
            "identical"
            if a == b
            else "DIFFER "
            + ", ".join(what for what, x, y in zip(("exit", "stdout", "stderr", "charts"), a, b) if x != y)
        )
        lines.append(f"{command} {case:<36} {name:<16} {'':<9} {verdict}")
        print(lines[-1], flush=True)
    return lines


def annotated(binary: str, trace: Path, annotations: Path, work: Path, name: str) -> Path:
    """The trace annotated (by the baseline, with the default options), for the reports."""
    output = work / "annotated" / f"{name}.annotated.json.gz"
    if not output.exists():
        output.parent.mkdir(parents=True, exist_ok=True)
        if run(binary, trace, annotations, output, [], {}) != 0:
            sys.exit(f"{binary} could not annotate {trace}")
    return output


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("baseline")
    p.add_argument("candidate")
    p.add_argument("--size", type=int, default=200, help="MB of JSON of the bench-shaped traces")
    p.add_argument("--work", type=Path, default=ROOT / "bench" / "data" / "compare")
    a = p.parse_args()
    out_dir = a.work / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    with_ids = bench_trace(a.work, f"{a.size}mb", a.size)
    for trace in (with_ids[0], gzipped(with_ids[0])):
        lines += compare(
            a.baseline,
            a.candidate,
            f"bench {a.size} MB {trace.name}",
            trace,
            with_ids[1],
            LARGE_OPTIONS,
            out_dir,
        )
    modules = bench_trace(a.work, f"{a.size}mb-modules", a.size, module_runs=4)
    lines += compare(
        a.baseline, a.candidate, f"bench {a.size} MB modules", *modules, LARGE_OPTIONS[:2], out_dir
    )
    no_ids = bench_trace(a.work, f"{a.size}mb-noids", a.size, node_ids=False)
    lines += compare(
        a.baseline, a.candidate, f"bench {a.size} MB without ids", *no_ids, RECOVERY_OPTIONS, out_dir
    )
    for example in sorted((ROOT / "examples").glob("*/000000.h200.pt.trace.json.gz")):
        annotations = next(example.parent.glob("kernel_annotations_*.json"))
        lines += compare(
            a.baseline,
            a.candidate,
            f"example {example.parent.name}",
            example,
            annotations,
            SMALL_OPTIONS,
            out_dir,
        )
    for fixture in sorted(FIXTURES.glob("*.json.gz")):
        annotations = fixture_annotations(a.work, fixture)
        lines += compare(
            a.baseline, a.candidate, f"fixture {fixture.name}", fixture, annotations, SMALL_OPTIONS, out_dir
        )
    reports = [
        annotated(a.baseline, example, next(example.parent.glob("kernel_annotations_*.json")), a.work, name)
        for name, example in (
            (e.parent.name, e) for e in sorted((ROOT / "examples").glob("*/000000.h200.pt.trace.json.gz"))
        )
    ]
    reports += [
        annotated(a.baseline, f, fixture_annotations(a.work, f), a.work, f.name.removesuffix(".json.gz"))
        for f in sorted(FIXTURES.glob("*.json.gz"))
    ]
    reports.append(annotated(a.baseline, *with_ids, a.work, f"bench-{a.size}mb"))
    for trace in reports:
        name = trace.name.removesuffix(".annotated.json.gz")
        lines += compare_reports(a.baseline, a.candidate, "summary", name, [trace], SUMMARY_OPTIONS, out_dir)
    lines += compare_reports(
        a.baseline, a.candidate, "summary", "all annotated", reports, SUMMARY_OPTIONS[:3], out_dir
    )
    small = reports[:-1]  # the bench trace is compared with itself only
    pairs = [(base, test) for base in small for test in small if base != test]
    for base, test in pairs + [(r, r) for r in reports]:
        case = f"{base.name.split('.')[0]} vs {test.name.split('.')[0]}"
        options = DIFF_OPTIONS if base != test else DIFF_OPTIONS[:4]
        lines += compare_reports(a.baseline, a.candidate, "diff", case, [base, test], options, out_dir)
    differ = [line for line in lines if "DIFFER" in line]
    print(f"\n{len(lines)} outputs compared, {len(differ)} differ")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
