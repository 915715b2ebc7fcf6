"""Traces on disk for the tests of the trace processor: small hand-made ones, and the
``traces/step_N/RANK.ID.pt.trace.json.gz`` layout of a training job."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import gen_trace


def kernel(
    ts: float,
    dur: float,
    *,
    tid: int = 7,
    pid: int = 0,
    name: str = "k",
    replay: int = 1,
    node: int = 1,
    cat: str = "kernel",
    **args: Any,
) -> Dict[str, Any]:
    """A graphed GPU event; ``args`` go into its ``args`` (``module=...``, ...)."""
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": replay, "graph node id": node, "stream": tid, **args},
    }


def write_trace(path: Path, events: List[Dict[str, Any]]) -> Path:
    text = json.dumps({"schemaVersion": 1, "traceEvents": events})
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


def training_job(
    root: Path, steps: Sequence[int] = (1, 2), ranks: Sequence[int] = (0, 1), mb: float = 0.5
) -> List[Path]:
    """``root/traces/step_N/00000R.7.pt.trace.json.gz`` per step and rank, with
    ``root/traces/kernel_annotations_rankR_1.json`` per rank; returns the traces."""
    traces_dir = root / "traces"
    traces = []
    for rank in ranks:
        generated: Optional[tuple] = None
        for step in steps:
            step_dir = traces_dir / f"step_{step}"
            step_dir.mkdir(parents=True, exist_ok=True)
            path = step_dir / f"{rank:06d}.7.pt.trace.json.gz"
            generated = gen_trace.generate(path, mb, seed=rank)
            traces.append(path)
        staging = root / f"rank{rank}"
        staging.mkdir()
        json_path, _ = gen_trace.write_annotations(staging, *generated)
        json_path.rename(traces_dir / f"kernel_annotations_rank{rank}_1.json")
        shutil.rmtree(staging)
    return sorted(traces)


def cgfast(*args: Any, cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """Run the ``cgfast`` command line of the installed package."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "cgfast", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def read_json(path: Path) -> Any:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)
