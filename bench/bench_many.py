#!/usr/bin/env python3
"""Throughput of annotating many traces: ``cgfast annotate DIR -j N`` and
``cgfast.batch.annotate_many`` on a Dask ``LocalCluster`` of N workers.

    python bench/bench_many.py [--files 16] [--mb 20] [--plain] [--workers 1 2] [--repeat 3]

Generates ``--files`` synthetic traces of ``--mb`` MB each (uncompressed) in the
``traces/step_N/RANK.ID.pt.trace.json.gz`` layout of a training job, under
``bench/data/many-*`` (kept for the next run), then prints, for each way and number of
workers, the best wall time of ``--repeat`` runs as files/s, MB/s of input read from
disk and MB/s of trace JSON processed. Needs cgfast installed (``maturin develop
--release``) and, for the Dask rows, ``distributed``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import gen_trace

RANKS_PER_STEP = 8


def generate(root: Path, files: int, mb: float, gzipped: bool) -> dict:
    """The traces under ``root`` (made once); returns the manifest."""
    manifest_path = root / "manifest.json"
    if manifest_path.exists():
        return json.loads(manifest_path.read_text())
    shutil.rmtree(root, ignore_errors=True)
    traces_dir = root / "traces"
    generated_by_rank: dict[int, tuple] = {}
    json_bytes = 0
    for k in range(files):
        step, rank = divmod(k, RANKS_PER_STEP)
        step_dir = traces_dir / f"step_{step + 1}"
        step_dir.mkdir(parents=True, exist_ok=True)
        path = step_dir / f"{rank:06d}.1.pt.trace.json{'.gz' if gzipped else ''}"
        generated_by_rank[rank] = gen_trace.generate(path, mb, seed=rank)
        opener = gzip.open if gzipped else open
        with opener(path, "rb") as f:
            json_bytes += sum(len(chunk) for chunk in iter(lambda: f.read(1 << 20), b""))
        print(f"  generated {path.relative_to(root)}", file=sys.stderr)
    for rank, (rank_annotations, topology) in generated_by_rank.items():
        staging = root / "staging"
        staging.mkdir(exist_ok=True)
        json_path, _ = gen_trace.write_annotations(staging, rank_annotations, topology)
        json_path.rename(traces_dir / f"kernel_annotations_rank{rank}_1.json")
        shutil.rmtree(staging)
    traces = sorted(str(p) for p in traces_dir.rglob("*.pt.trace.json*") if ".annotated." not in p.name)
    manifest = {
        "traces": traces,
        "file_bytes": sum(os.path.getsize(t) for t in traces),
        "json_bytes": json_bytes,
    }
    manifest_path.write_text(json.dumps(manifest))
    return manifest


def remove_outputs(root: Path) -> None:
    for p in root.rglob("*.annotated.json*"):
        p.unlink()


def best_of(repeat: int, root: Path, run) -> float:
    times = []
    for _ in range(repeat):
        remove_outputs(root)
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def cli_run(traces_dir: Path, jobs: int) -> None:
    cmd = [
        sys.executable,
        "-m",
        "cgfast",
        "annotate",
        str(traces_dir),
        "-j",
        str(jobs),
        "--no-progress",
        "--json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"cgfast annotate failed: {done.stderr.strip()}")


def dask_rows(root: Path, workers: list[int], repeat: int):
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        print(
            "  (distributed is not installed: no annotate_many rows; pip install 'cgfast[dask]')",
            file=sys.stderr,
        )
        return
    from cgfast.batch import annotate_many

    for n in workers:
        with (
            LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0"
            ) as cluster,
            Client(cluster) as client,
        ):
            client.run(lambda: __import__("cgfast.batch"))  # workers import cgfast before the clock starts

            def run() -> None:
                failed = [r for r in annotate_many(root / "traces", engine=client) if not r["ok"]]
                if failed:
                    raise SystemExit(f"annotate_many failed: {failed[0]['error']}")

            yield f"annotate_many (Dask, {n} worker{'s' if n > 1 else ''})", n, best_of(repeat, root, run)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--files", type=int, default=16)
    p.add_argument("--mb", type=float, default=20.0, help="uncompressed MB per trace")
    p.add_argument("--plain", action="store_true", help="plain .json traces instead of .json.gz")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--data", type=Path, default=Path(__file__).resolve().parent / "data")
    a = p.parse_args()

    root = a.data / f"many-{a.files}x{a.mb:g}mb-{'json' if a.plain else 'gz'}"
    manifest = generate(root, a.files, a.mb, not a.plain)
    files, file_mb, json_mb = (
        len(manifest["traces"]),
        manifest["file_bytes"] / 1e6,
        manifest["json_bytes"] / 1e6,
    )
    print(f"{files} traces, {file_mb:.1f} MB on disk, {json_mb:.1f} MB of JSON, {os.cpu_count()} cores")

    rows = [
        (f"cgfast annotate DIR -j {n}", n, best_of(a.repeat, root, lambda n=n: cli_run(root / "traces", n)))
        for n in a.workers
    ]
    rows.extend(dask_rows(root, a.workers, a.repeat))
    remove_outputs(root)

    print(f"{'':40} {'workers':>7} {'seconds':>8} {'files/s':>8} {'disk MB/s':>10} {'JSON MB/s':>10}")
    for name, n, seconds in rows:
        print(
            f"{name:40} {n:>7} {seconds:>8.2f} {files / seconds:>8.2f} {file_mb / seconds:>10.1f} {json_mb / seconds:>10.1f}"
        )


if __name__ == "__main__":
    main()
