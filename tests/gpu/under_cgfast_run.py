"""What the GPU tests of ``cgfast run`` share: a directory per run (kept under
``CGFAST_E2E_OUT``), the ``cgfast`` command line of this checkout, and the graphed
kernels of an annotated trace with the check that each is annotated."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def workdir(tmp_path, group: str, name: str) -> str:
    """An empty directory for one run: ``$CGFAST_E2E_OUT/group/name`` when that is set."""
    keep = os.environ.get("CGFAST_E2E_OUT")
    path = os.path.join(keep, group, name) if keep else str(tmp_path / name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def env() -> dict:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "python"), os.environ.get("PYTHONPATH", "")]),
    }


def cgfast(*args, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m cgfast ARGS`` (the console script's code), its output printed for the log."""
    done = subprocess.run(
        [sys.executable, "-m", "cgfast", *map(str, args)],
        capture_output=True,
        text=True,
        env=env(),
        timeout=timeout,
    )
    print(done.stdout[-4000:], done.stderr[-6000:])
    return done


def graphed_kernels(trace: str) -> list:
    """The kernels of graph replays in an annotated trace (.json or .json.gz)."""
    with gzip.open(trace, "rt") if trace.endswith(".gz") else open(trace) as f:
        events = json.load(f)["traceEvents"]
    return [e for e in events if e.get("cat") == "kernel" and e.get("args", {}).get("graph node id", 0) != 0]


def assert_all_annotated(kernels: list, names: set, key: str = "module") -> set:
    """Every kernel carries ``key``; every module named is one of ``names``; the modules."""
    assert kernels
    missing = [e["name"] for e in kernels if key not in e["args"]]
    assert not missing, f"{len(missing)} of {len(kernels)}: {missing[:5]}"
    modules = {e["args"]["module"] for e in kernels if "module" in e["args"]}
    assert modules <= names, modules - names
    return modules
