"""Ctrl-C and SIGTERM stop `cgfast` (the binary and the console script) promptly:
exit status 130, one line on stderr, no temporary left, an existing output untouched.
Each run stops by its own token alone: Ctrl-C stops the run on Python's main thread,
`cancel=` any run, and neither touches another run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import cgfast
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


def signalled_once_started(argv: list, started_in: Path, signum=signal.SIGINT, timeout: float = 30) -> tuple:
    """Run ``argv``; once a temporary output appears in ``started_in`` (the run is
    reading), send it ``signum``. (return code, stdout, stderr, seconds from the signal
    to its exit)."""
    proc = subprocess.Popen(
        [str(a) for a in argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_env(),
        preexec_fn=interactive,
    )
    try:
        assert wait_for(lambda: partials(started_in), 60), "the run never started"
        proc.send_signal(signum)
        signalled = time.monotonic()
        out, err = proc.communicate(timeout=timeout)
        stopped_after = time.monotonic() - signalled
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, err, stopped_after


@pytest.mark.parametrize("command", commands())
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("existing", [True, False], ids=["replacing", "new"])
def test_a_signal_stops_the_run_cleanly(tmp_path, big_trace, command, signum, existing):
    trace, ann = big_trace
    out = tmp_path / ("out.json.gz" if existing else "out.json")
    if existing:
        out.write_bytes(b"precious")
        os.utime(out, (1_000_000_000, 1_000_000_000))
    status, _, err, stopped_after = signalled_once_started(
        [*command, trace, "-a", ann, "-o", out], tmp_path, signum
    )
    assert stopped_after < 5, "not stopped promptly"
    assert status == 130, err
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
    status, _, err, _ = signalled_once_started([sys.executable, "-c", script], tmp_path)
    assert status == 42, err
    assert partials(tmp_path) == [] and not out.exists()


# ----------------------------------------------------------------- runs stop independently

EXAMPLE = ROOT / "examples" / "h200-compiled-transformer"
EXAMPLE_TRACE = EXAMPLE / "000000.h200.pt.trace.json.gz"


def example_annotations() -> Path:
    return next(EXAMPLE.glob("kernel_annotations_*.json"))


TWO_RUNS = """
import json, sys, threading
import cgfast

big, ann, main_out, worker_out, example, example_ann, after_out = sys.argv[1:]
outcome = {}

def worker():
    try:
        outcome["worker"] = cgfast.annotate_file(big, ann, worker_out)["events"]
    except BaseException as e:
        outcome["worker"] = repr(e)

thread = threading.Thread(target=worker)
thread.start()
try:
    cgfast.annotate_file(big, ann, main_out)
    outcome["main"] = "finished"
except KeyboardInterrupt:
    outcome["main"] = "KeyboardInterrupt"
    outcome["worker_running_then"] = thread.is_alive()
thread.join()
outcome["after"] = cgfast.annotate_file(example, example_ann, after_out)["annotated"]
print(json.dumps(outcome))
"""


def test_ctrl_c_stops_the_main_threads_run_alone(tmp_path, big_trace):
    """Two runs on two threads of one process: Ctrl-C stops the one on the main thread
    (KeyboardInterrupt, its temporary removed); the other finishes with the output an
    uninterrupted run writes, and a run started afterwards is not affected."""
    trace, ann = big_trace
    expected = tmp_path / "expected.json"
    cgfast.annotate_file(trace, ann, expected)
    after_expected = tmp_path / "after_expected.json"
    cgfast.annotate_file(EXAMPLE_TRACE, example_annotations(), after_expected)
    main_dir, worker_dir = tmp_path / "main", tmp_path / "worker"
    main_dir.mkdir()
    worker_dir.mkdir()
    main_out, worker_out, after_out = main_dir / "o.json", worker_dir / "o.json", tmp_path / "after.json"
    argv = [trace, ann, main_out, worker_out, EXAMPLE_TRACE, example_annotations(), after_out]
    # the worker's run started first: it is under way when the main thread's starts
    status, out, err, _ = signalled_once_started(
        [sys.executable, "-c", TWO_RUNS, *argv], main_dir, timeout=120
    )
    assert status == 0, err
    outcome = json.loads(out)
    assert outcome["main"] == "KeyboardInterrupt", outcome
    assert outcome["worker_running_then"], "the other run was under way when Ctrl-C came"
    assert isinstance(outcome["worker"], int) and outcome["worker"] > 0, outcome
    assert outcome["after"] > 0, outcome
    assert partials(main_dir) == [] and not main_out.exists()
    assert worker_out.read_bytes() == expected.read_bytes(), (
        "the other run's output is an uninterrupted run's"
    )
    assert after_out.read_bytes() == after_expected.read_bytes()


def test_a_token_stops_its_own_run_alone(tmp_path):
    """On real traces: a run given a cancelled token stops (CancelledError, nothing
    left behind) while a run beside it on another thread writes its whole output, and
    a run after them is not affected."""
    annotations = example_annotations()
    expected = tmp_path / "expected.json"
    cgfast.annotate_file(EXAMPLE_TRACE, annotations, expected)
    token = cgfast.CancelToken()
    token.cancel()
    assert token.cancelled
    start = threading.Barrier(2)
    outcome: dict = {}

    def run(name, **options):
        start.wait()
        try:
            outcome[name] = cgfast.annotate_file(
                EXAMPLE_TRACE, annotations, tmp_path / f"{name}.json", **options
            )
        except BaseException as e:  # what the run raised is what the test checks
            outcome[name] = e

    threads = [
        threading.Thread(target=run, args=("cancelled",), kwargs={"cancel": token}),
        threading.Thread(target=run, args=("other",)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert isinstance(outcome["cancelled"], cgfast.CancelledError), outcome
    assert not (tmp_path / "cancelled.json").exists() and partials(tmp_path) == []
    assert (tmp_path / "other.json").read_bytes() == expected.read_bytes()
    cgfast.annotate_file(EXAMPLE_TRACE, annotations, tmp_path / "after.json")
    assert (tmp_path / "after.json").read_bytes() == expected.read_bytes()


def test_a_token_stops_a_run_on_another_thread_promptly(tmp_path, big_trace):
    """Signals reach only the main thread: a run elsewhere is stopped through its token,
    at its next chunk, its temporary removed."""
    trace, ann = big_trace
    out = tmp_path / "o.json"
    token = cgfast.CancelToken()
    outcome: dict = {}

    def run():
        try:
            outcome["run"] = cgfast.annotate_file(trace, ann, out, cancel=token)
        except BaseException as e:  # what the run raised is what the test checks
            outcome["run"] = e

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert wait_for(lambda: partials(tmp_path), 60), "the run never started"
        token.cancel()
        cancelled = time.monotonic()
        thread.join(30)
    finally:
        token.cancel()
        thread.join()
    assert time.monotonic() - cancelled < 5, "not stopped promptly"
    assert isinstance(outcome["run"], cgfast.CancelledError), outcome
    assert partials(tmp_path) == [] and not out.exists()
