#!/usr/bin/env python3
"""How often ``cgfast diff`` calls a change where there is none, and finds the one there
is, when each side has several runs (processes) that each place the model's memory in
their own way.

A small model (the 12 kernels of ``tests/test_diff.py``'s, 11 modules) is written as
``--runs-a-side`` traces a side, one per run, ``--replays`` replays each; every run
scales each module by its own placement effect, uniform in ±``--placement`` percent and
fixed for the run, and every kernel of every replay by ±0.5% of noise. For each of
``--seeds`` seeds, three programs: a base, the same program again, and the program with
``model.layers.1.mlp`` 15% slower in every run. Each pair is compared twice:

* as runs (one trace per run: each interval the hierarchical bootstrap between runs), and
* pooled (the same replays, one trace a side: one run a side, each replay a sample, the
  intervals between replays, as ``cgfast diff`` had it before runs),

and the script counts the seeds where the same program has any value or path not
``same`` or trips ``--fail-if-slower 5``, and where the slower program has exactly the
MLP and the paths holding it ``slower``.

    python bench/bench_diff_runs.py [--seeds 50] [--placement 2 3] [--runs-a-side 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_annotate import cgfast_binary  # noqa: E402

# (module or None, kernel name, µs): one replay
MODEL = [
    ("model.embed", "embedding_kernel", 8.0),
    ("model.layers.0.attn", "gemm_qkv", 30.0),
    ("model.layers.0.attn", "softmax", 10.0),
    ("model.layers.0.mlp", "gemm_up", 40.0),
    ("model.layers.0.mlp", "gelu", 6.0),
    ("model.layers.1.attn", "gemm_qkv", 30.0),
    ("model.layers.1.attn", "softmax", 10.0),
    ("model.layers.1.mlp", "gemm_up", 40.0),
    ("model.layers.1.mlp", "gelu", 6.0),
    ("model.norm", "norm", 5.0),
    ("lm_head", "gemm_head", 25.0),
    (None, "Memcpy DtoD (Device -> Device)", 3.0),
]
MODULES = sorted({m for m, _, _ in MODEL if m})
SLOWER = "model.layers.1.mlp"
FLAGGED_WHEN_SLOWER = {SLOWER, "model.layers.1", "model.layers", "model"}
NOISE = 0.01


def replays(rng: random.Random, count: int, scale: dict, first: int, start_us: float) -> list[dict]:
    """``count`` replays of MODEL one after the other, correlations from ``first``."""
    events, ts = [], start_us
    for r in range(count):
        for node, (module, name, us) in enumerate(MODEL, start=1):
            dur = round(us * scale.get(module, 1.0) * (1 + NOISE * (rng.random() - 0.5)), 3)
            args = {"correlation": first + r, "graph node id": node, "stream": 7}
            if module:
                args["module"] = module
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": 7,
                    "ts": round(ts, 3),
                    "dur": dur,
                    "args": args,
                }
            )
            ts += dur + 0.5
        ts += 40.0
    return events


def program(
    directory: Path, seed: int, a: argparse.Namespace, placement: float, slower: bool
) -> tuple[list[Path], Path]:
    """The runs of a program as a trace each, and the same replays as one pooled trace."""
    rng = random.Random(seed)
    runs, pooled = [], []
    for k in range(a.runs_a_side):
        scale = {m: 1 + rng.uniform(-placement, placement) for m in MODULES}
        if slower:
            scale[SLOWER] *= 1.15
        events = replays(rng, a.replays, scale, first=100 + 1000 * k, start_us=1000.0 + 1e6 * k)
        runs.append(write(directory / f"run{k}.annotated.json", events))
        pooled += events
    return runs, write(directory.with_name(directory.name + "-pooled.annotated.json"), pooled)


def write(path: Path, events: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def diff(base: list[Path], test: list[Path]) -> tuple[int, set]:
    """Exit status of ``--fail-if-slower 5``, and the values and paths not ``same``."""
    sides = [*(a for b in base for a in ("--base", str(b))), *(a for t in test for a in ("--test", str(t)))]
    argv = [cgfast_binary(), "diff", *sides, "--format", "json", "--fail-if-slower", "5", "--no-progress"]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode not in (0, 3):
        sys.exit(done.stderr)
    report = json.loads(done.stdout)
    return done.returncode, {r["value"] for r in [*report["rows"], *report["tree"]] if r["verdict"] != "same"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=50)
    p.add_argument("--placement", type=float, nargs="+", default=[2.0, 3.0], help="percent")
    p.add_argument("--runs-a-side", type=int, default=4)
    p.add_argument("--replays", type=int, default=30, help="per run")
    a = p.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for placement in a.placement:
            counts = {
                (how, what): 0
                for how in ("runs", "pooled")
                for what in ("same flagged", "gate tripped", "slower exactly")
            }
            for seed in range(a.seeds):
                d = Path(tmp) / f"{placement:g}-{seed}"
                programs = [
                    program(d / name, 3 * seed + i, a, placement / 100, name == "slower")
                    for i, name in enumerate(("base", "again", "slower"))
                ]
                (base, base_pooled), (again, again_pooled), (slower, slower_pooled) = programs
                for how, sides in (
                    ("runs", (base, again, slower)),
                    ("pooled", ([base_pooled], [again_pooled], [slower_pooled])),
                ):
                    status, flagged = diff(sides[0], sides[1])
                    counts[(how, "same flagged")] += bool(flagged)
                    counts[(how, "gate tripped")] += status == 3
                    status, flagged = diff(sides[0], sides[2])
                    counts[(how, "slower exactly")] += status == 3 and flagged == FLAGGED_WHEN_SLOWER
            results.append((placement, counts))
    print(
        f"\ncgfast diff, {a.runs_a_side} runs a side of {a.replays} replays, {a.seeds} seeds; "
        f"{os.cpu_count()} cores, {platform.machine()}, {time.strftime('%Y-%m-%d')}"
    )
    print(
        f"{'placement':>10} {'compared':>8} {'same program: any flagged':>26} {'gate (5%) tripped':>18} {'15% slower MLP: exactly it':>27}"
    )
    for placement, counts in results:
        for how in ("runs", "pooled"):
            print(
                f"{'±' + format(placement, 'g') + '%':>10} {how:>8} {counts[(how, 'same flagged')]:>20} of {a.seeds:<3}"
                f"{counts[(how, 'gate tripped')]:>12} of {a.seeds:<3}{counts[(how, 'slower exactly')]:>21} of {a.seeds:<3}"
            )


if __name__ == "__main__":
    main()
