"""Run a capture bench on two builds of cgfast side by side: ``--against DIR``.

Each round runs the bench once in a fresh process per build, the order alternating
round by round: this checkout's build (the ``cgfast`` this interpreter imports) and
the other one, imported from ``DIR`` (a directory holding its ``cgfast`` package with
the extension built in it: ``python/`` of a checkout after ``maturin develop`` or
``pip install -e .`` there, or a ``pip install --target`` directory). Prints each
figure's median over the rounds for both builds, and the median over the rounds of
this build's figure divided by the other's of the same round (runs next to each other
share the machine's load of the moment, so the paired ratio stands up to a busy machine
better than the ratio of medians); writes everything to ``--json`` when given.

The benches that take ``--against`` use only what both builds have (the public API,
and ``capture_build`` for what they reach inside).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import cgfast

THIS_BUILD = str(Path(cgfast.__file__).resolve().parent.parent)


def _flat(figures: dict, prefix: str = "") -> Dict[str, float]:
    """Numeric leaves of nested dicts, keyed by their dotted path."""
    flat: Dict[str, float] = {}
    for key, value in figures.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flat(value, f"{name}."))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            flat[name] = float(value)
    return flat


def _run_once(script: str, argv: Sequence[str], build: str, out: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [build, os.environ.get("PYTHONPATH")])))
    subprocess.run(
        [sys.executable, script, *argv, "--json", out], env=env, check=True, stdout=subprocess.DEVNULL
    )
    with open(out) as f:
        figures = json.load(f)
    imported = figures.get("cgfast")
    if imported is not None and not imported.startswith(os.path.realpath(build)):
        raise SystemExit(f"{script} under {build} imported cgfast from {imported}")
    return figures


def side_by_side(script: str, argv: Sequence[str], against: str, rounds: int, json_out: Optional[str]) -> int:
    """Run ``script argv --json FILE`` ``rounds`` times per build, alternating, and
    print the medians; the exit status of the bench (non-zero when a run failed)."""
    builds = {"this": THIS_BUILD, "other": os.path.abspath(against)}
    if not (Path(builds["other"]) / "cgfast" / "__init__.py").is_file():
        raise SystemExit(f"--against {against}: no cgfast package there")
    runs: Dict[str, List[Dict[str, float]]] = {"this": [], "other": []}
    with tempfile.TemporaryDirectory() as directory:
        for round_index in range(rounds):
            order = ("this", "other") if round_index % 2 == 0 else ("other", "this")
            for name in order:
                figures = _run_once(script, argv, builds[name], os.path.join(directory, f"{name}.json"))
                runs[name].append(_flat(figures))
            print(f"round {round_index + 1}/{rounds} done", file=sys.stderr, flush=True)
    keys = [key for key in runs["this"][0] if all(key in run for run in runs["this"] + runs["other"])]
    medians = {
        name: {key: statistics.median(run[key] for run in runs[name]) for key in keys} for name in runs
    }
    paired = {
        key: statistics.median(this[key] / other[key] for this, other in zip(runs["this"], runs["other"]))
        for key in keys
        if all(other[key] for other in runs["other"])
    }
    width = max(len(key) for key in keys) if keys else 10
    print(f"{'figure':{width}s} {'this':>12s} {'other':>12s} {'paired this/other':>18s}")
    for key in keys:
        ratio = f"{paired[key]:18.3f}" if key in paired else f"{'-':>18s}"
        print(f"{key:{width}s} {medians['this'][key]:12.4f} {medians['other'][key]:12.4f} {ratio}")
    print(f"medians of {rounds} rounds; this = {builds['this']}, other = {builds['other']}")
    if json_out:
        with open(json_out, "w") as f:
            json.dump(
                {
                    "builds": builds,
                    "rounds": rounds,
                    "medians": medians,
                    "paired_ratio": paired,
                    "runs": runs,
                },
                f,
                indent=1,
            )
    return 0
