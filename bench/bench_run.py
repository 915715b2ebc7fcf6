"""What ``cgfast run`` costs a program that captures nothing: each program started plainly
and under ``cgfast run``, side by side, the order alternating round by round.

    python bench/bench_run.py [--rounds 11] [--json FILE]

Programs: ``python -c "import torch"`` and a short eager script (a small MLP, 200
forward passes; on the GPU when there is one). Each is timed three ways in every round:
plainly; with the environment ``cgfast run`` gives it (its start-up hook: what the
program itself pays); and under ``cgfast run`` as the console script starts it
(``python -m cgfast run``: cgfast's own start and end too). For each, the median wall
time, and the median of the paired differences from plain (the same round) with the
sign test's 95% interval.

cgfast's own modules are compiled to bytecode first (``compileall``), as installing a
wheel does: an editable install run with ``PYTHONDONTWRITEBYTECODE=1`` would otherwise
compile cgfast's source in every process, which no installed cgfast does.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

from bench_spans import median_interval
from cgfast.run._command import environment
from cgfast.run._settings import RunSettings

EAGER = """
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).to(device)
x = torch.randn(64, 256, device=device)
with torch.no_grad():
    for _ in range(200):
        x = model(x).tanh()
if device == "cuda":
    torch.cuda.synchronize()
"""

PROGRAMS = {"import torch": ["-c", "import torch"], "eager script": ["-c", EAGER]}


def timed(argv: list[str], env: Optional[dict] = None) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - started


def measure(program: list[str], rounds: int, out: str) -> dict:
    plain_argv = [sys.executable, *program]
    hooked_env = environment(RunSettings(out=out))
    run_argv = [sys.executable, "-m", "cgfast", "run", "--out", out, "--", *plain_argv]
    timed(plain_argv)  # page in torch once before any is timed
    ways = {"plain": (plain_argv, None), "hooked": (plain_argv, hooked_env), "run": (run_argv, None)}
    times: Dict[str, List[float]] = {way: [] for way in ways}
    for k in range(rounds):
        order = list(ways) if k % 2 == 0 else list(ways)[::-1]
        for way in order:
            argv, env = ways[way]
            times[way].append(timed(argv, env))
    row: dict = {"rounds": rounds}
    for way in ("hooked", "run"):
        extra, low, high = median_interval([t - p for p, t in zip(times["plain"], times[way])])
        row[way] = {
            "median_s": statistics.median(times[way]),
            "extra_s": extra,
            "extra_interval_s": [low, high],
        }
    row["plain"] = {"median_s": statistics.median(times["plain"])}
    row["runs_s"] = times
    return row


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    import cgfast

    compileall.compile_dir(os.path.dirname(cgfast.__file__), quiet=1)
    figures = {}
    with tempfile.TemporaryDirectory() as out:
        for name, program in PROGRAMS.items():
            figures[name] = row = measure(program, args.rounds, out)
            print(
                f"{name}: plain {row['plain']['median_s']:.3f} s ({args.rounds} rounds, medians, 95% intervals)"
            )
            for way, label in (("hooked", "with the start-up hook"), ("run", "under cgfast run")):
                figure = row[way]
                low, high = figure["extra_interval_s"]
                print(
                    f"  {label:23} {figure['median_s']:.3f} s  difference {figure['extra_s'] * 1000:+.0f} ms "
                    f"[{low * 1000:+.0f}, {high * 1000:+.0f}]"
                )
        files = os.listdir(out)
    if files:
        raise SystemExit(f"a program that captures nothing wrote {files}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
