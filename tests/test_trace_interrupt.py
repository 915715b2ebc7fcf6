"""Ctrl-C and SIGTERM stop `cgfast` (the binary and the console script) promptly:
exit status 130, one line on stderr, no temporary left, an existing output untouched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import clean_env, generate, write_json_annotations

ROOT = Path(__file__).resolve().parent.parent
BINARY = Path(os.environ.get("CGFAST_BIN") or ROOT / "target" / "release" / "cgfast")
CONSOLE = [sys.executable, "-c", "from cgfast._cli import main; main()"]  # what the console script runs


def commands():
    params = [pytest.param(CONSOLE, id="console-script")]
    if BINARY.exists():
        params.insert(0, pytest.param([str(BINARY)], id="binary"))
    return params


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory):
    """A trace large enough (~150 MB) that a run is still going when the signal comes."""
    d = tmp_path_factory.mktemp("big")
    trace = d / "big.json"
    ann = write_json_annotations(d / "ann.json", generate(trace, target_mb=150, graphs=3, nodes=200))
    yield trace, ann
    trace.unlink()


def partials(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".partial"))


def interactive() -> None:
    """A child's SIGINT as a terminal gives it: a shell starts background jobs (as CI
    runners may start the tests) with SIGINT ignored, and Python then installs no
    KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.005)
    return False


@pytest.mark.parametrize("command", commands())
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("existing", [True, False], ids=["replacing", "new"])
def test_a_signal_stops_the_run_cleanly(tmp_path, big_trace, command, signum, existing):
    trace, ann = big_trace
    out = tmp_path / ("out.json.gz" if existing else "out.json")
    if existing:
        out.write_bytes(b"precious")
        os.utime(out, (1_000_000_000, 1_000_000_000))
    proc = subprocess.Popen(
        [*command, str(trace), "-a", str(ann), "-o", str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        preexec_fn=interactive,
    )
    try:
        # the temporary output appears when the run starts reading
        assert wait_for(lambda: partials(tmp_path), 60), "the run never started"
        proc.send_signal(signum)
        signalled = time.monotonic()
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert time.monotonic() - signalled < 5, "not stopped promptly"
    assert proc.returncode == 130, err
    assert err.splitlines() == ["cgfast: interrupted"], err
    assert partials(tmp_path) == []
    if existing:
        assert out.read_bytes() == b"precious" and out.stat().st_mtime == 1_000_000_000
    else:
        assert not out.exists()


def test_annotate_file_is_interruptible(tmp_path, big_trace):
    """cgfast.annotate_file on the main thread raises KeyboardInterrupt on Ctrl-C, its
    temporary removed."""
    trace, ann = big_trace
    out = tmp_path / "o.json"
    script = (
        "import cgfast, sys\n"
        "try:\n"
        f"    cgfast.annotate_file({str(trace)!r}, {str(ann)!r}, {str(out)!r})\n"
        "except KeyboardInterrupt:\n"
        "    sys.exit(42)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        preexec_fn=interactive,
    )
    try:
        assert wait_for(lambda: partials(tmp_path), 60), "the run never started"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 42, err
    assert partials(tmp_path) == [] and not out.exists()
