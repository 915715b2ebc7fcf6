"""``cgfast run -- COMMAND`` on the CPU: the start-up hook in every kind of child process,
the program's own stdout, stdin, exit status and signals, no trace of cgfast outside the
run, annotation files saved at each export and at exit (captures on the fake driver),
a hidden sitecustomize still run, and one-line failures."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytest.importorskip("torch")

import cgfast
from cgfast import load_annotations
from cgfast.annotations import load_graphs
from helpers import CGFAST_BIN

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "run_programs")
REPO = os.path.dirname(HERE)


def cgfast_run(*args, input=None, env=None, cwd=None, timeout=240):
    """``cgfast run ARGS`` through the console script's code, as users start it."""
    return subprocess.run(
        [sys.executable, "-m", "cgfast", "run", *map(str, args)],
        input=input,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )


def program(name):
    return os.path.join(PROGRAMS, name)


def states(results):
    found = []
    for name in sorted(os.listdir(results)):
        with open(os.path.join(results, name)) as f:
            found.append(json.load(f))
    return found


def assert_set_up(state):
    # nothing of the capture layer until the first capture begins (a forked child has its
    # parent's, which began one); then all of it
    began = state["role"] == "fork"
    assert state["before_capture"] == {"waiting_for_a_capture": not began, "capture_layer_imported": began}
    assert state["recording"] and state["modules_named"] and state["exports_saved"], state
    assert state["id_source_chosen"], state  # at the first capture
    assert state["inherited_annotations"] == 0, state


@pytest.mark.parametrize("how", ["spawn", "forkserver", "fork", "subprocess"])
def test_every_kind_of_child_process_is_set_up(tmp_path, how):
    results = tmp_path / "results"
    results.mkdir()
    done = cgfast_run(
        "--out", tmp_path / "out", "--", sys.executable, program("report_state.py"), results, how
    )
    assert done.returncode == 0, done.stderr
    found = states(results)
    assert len(found) == 2 and len({s["pid"] for s in found}) == 2
    for state in found:
        assert_set_up(state)


def test_torchrun_workers_are_set_up(tmp_path):
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        pytest.skip("torchrun is not installed beside this Python")
    results = tmp_path / "results"
    results.mkdir()
    done = cgfast_run(
        "--out",
        tmp_path / "out",
        "--",
        torchrun,
        "--nproc-per-node",
        "2",
        program("torchrun_worker.py"),
        results,
    )
    assert done.returncode == 0, done.stderr
    found = states(results)
    assert sorted(s["role"] for s in found) == ["rank0", "rank1"]
    for state in found:
        assert_set_up(state)


def test_nothing_outside_the_run(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    before = dict(os.environ)
    done = cgfast_run("--out", tmp_path / "out", "--", sys.executable, "-c", "pass")
    assert done.returncode == 0
    assert dict(os.environ) == before
    # the same program started outside cgfast run: no hook
    subprocess.run([sys.executable, program("report_state.py"), str(results), "none"], check=True)
    (state,) = states(results)
    assert not state["recording"] and not state["modules_named"] and not state["exports_saved"]


def test_stdout_stdin_and_exit_status_are_the_programs(tmp_path):
    script = "import sys; data = sys.stdin.read(); print(data.upper(), end=''); sys.exit(7)"
    done = cgfast_run("--out", tmp_path / "out", "--", sys.executable, "-c", script, input="piped in\n")
    assert done.stdout == "PIPED IN\n"  # nothing of cgfast's
    assert done.returncode == 7
    lines = done.stderr.splitlines()
    assert lines[0].startswith("cgfast run: annotations of every Python process go to ")
    assert "exited with status 7" in done.stderr


def test_a_program_that_fails_keeps_its_error_and_status(tmp_path):
    done = cgfast_run("--out", tmp_path / "out", "--", sys.executable, "-c", "raise SystemExit('it broke')")
    assert done.returncode == 1
    assert "it broke" in done.stderr
    done = cgfast_run("--out", tmp_path / "out", "--", sys.executable, "-c", "1/0")
    assert done.returncode == 1 and "ZeroDivisionError" in done.stderr


def start_run(args, marker, cwd=None):
    """``cgfast run ARGS`` started in the background, once ``marker`` exists (the program
    makes it when it is where the test wants it)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "cgfast", "run", *map(str, args)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    return proc


def _start(tmp_path, script):
    (tmp_path / "program.py").write_text(textwrap.dedent(script))
    args = ["--out", tmp_path / "out", "--", sys.executable, "program.py"]
    return start_run(args, tmp_path / "started", cwd=tmp_path)


@pytest.mark.parametrize("signum,status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signals_reach_the_program_and_its_status_is_returned(tmp_path, signum, status):
    proc = _start(
        tmp_path,
        """
        import pathlib, time
        pathlib.Path("started").touch()
        time.sleep(60)
        """,
    )
    proc.send_signal(signum)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    assert f"exited with status {status}" in err


def test_a_program_handling_sigterm_decides_its_status(tmp_path):
    proc = _start(
        tmp_path,
        """
        import pathlib, signal, sys, time
        signal.signal(signal.SIGTERM, lambda *_: (print("cleaned up"), sys.exit(3)))
        pathlib.Path("started").touch()
        time.sleep(60)
        """,
    )
    proc.send_signal(signal.SIGTERM)
    out, _err = proc.communicate(timeout=60)
    assert (proc.returncode, out) == (3, "cleaned up\n")


def test_annotations_are_saved_at_each_export_listing_the_trace(tmp_path):
    out = tmp_path / "out"
    trace = tmp_path / "elsewhere" / "worker0.1.pt.trace.json"
    trace.parent.mkdir()
    done = cgfast_run("--out", out, "--", sys.executable, program("fake_capture.py"), trace)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "program output\n"
    (name,) = os.listdir(out)
    assert name.startswith("kernel_annotations_rank0_") and name.endswith(".json")
    annotations = load_annotations(out / name)
    modules = sorted({item["module"] for items in annotations.values() for item in items})
    assert modules == ["0", "1", "2"]
    assert load_graphs(out / name)
    with open(out / name) as f:
        assert json.load(f)["traces"] == [str(trace)]
    assert trace.exists()
    paired = subprocess.run(
        [sys.executable, "-m", "cgfast", "annotate", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert paired.returncode == 0, paired.stderr
    (report,) = json.loads(paired.stdout)["reports"]  # the trace elsewhere, with this process's file
    assert os.path.samefile(report["annotations"], out / name) and report["annotations_loaded"] == len(
        annotations
    )
    assert report["output"] == str(trace).replace(".json", ".annotated.json")
    assert "annotations  1 file (rank 0)" in done.stderr and f"cgfast annotate {out}" in done.stderr
    assert "traces       1 exported by the program" in done.stderr


def test_annotations_are_saved_at_exit_and_a_process_that_captured_nothing_writes_nothing(tmp_path):
    out = tmp_path / "out"
    done = cgfast_run(
        "--out",
        out,
        "--",
        sys.executable,
        program("fake_capture.py"),
        tmp_path / "t.json",
        "--exit-without-export",
    )
    assert done.returncode == 0, done.stderr
    (name,) = os.listdir(out)
    with open(out / name) as f:
        assert "traces" not in json.load(f)
    assert "traces       none exported: profile the program" in done.stderr
    shutil.rmtree(out)
    done = cgfast_run(
        "--out", out, "--", sys.executable, program("fake_capture.py"), tmp_path / "t.json", "--no-capture"
    )
    assert done.returncode == 0, done.stderr
    assert os.listdir(out) == []
    assert "annotations  none in" in done.stderr and "no process captured a CUDA graph" in done.stderr


def test_a_forked_child_forgets_what_its_parent_recorded(tmp_path):
    out = tmp_path / "out"
    done = cgfast_run(
        "--out", out, "--", sys.executable, program("fake_capture.py"), tmp_path / "t.json", "--fork-child"
    )
    assert done.returncode == 0, done.stderr
    assert "inherited 0 annotations" in done.stderr
    assert len(os.listdir(out)) == 1  # the parent's; the child captured nothing


def test_the_hidden_sitecustomize_still_runs(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['HIDDEN_SITECUSTOMIZE'] = 'ran'\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    script = "import os, cgfast.run._process as p; print(os.environ.get('HIDDEN_SITECUSTOMIZE'))"
    done = cgfast_run("--out", tmp_path / "out", "--", sys.executable, "-c", script, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ran\n"


def test_a_failure_in_the_hook_is_one_warning_and_the_program_runs_on(tmp_path):
    startup = os.path.join(REPO, "python", "cgfast", "run", "startup")
    env = {**os.environ, "PYTHONPATH": startup, "CGFAST_RUN": "{not json"}
    done = subprocess.run(
        [sys.executable, "-c", "print('ran')"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout == "ran\n"
    (line,) = done.stderr.splitlines()
    assert line.startswith("cgfast run: warning: starting recording failed")


def test_a_failed_save_is_one_warning_and_the_program_keeps_its_status(tmp_path):
    out = tmp_path / "out"
    script = textwrap.dedent(
        f"""
        import runpy, shutil, sys
        shutil.rmtree({str(out)!r})   # the run's directory is gone before the export
        sys.argv = ["fake_capture.py", {str(tmp_path / "t.json")!r}]
        runpy.run_path({program("fake_capture.py")!r}, run_name="__main__")
        sys.exit(4)
        """
    )
    done = cgfast_run("--out", out, "--", sys.executable, "-c", script)
    assert done.returncode == 4
    assert done.stdout == "program output\n"
    (warning,) = [line for line in done.stderr.splitlines() if "warning" in line]
    assert warning.startswith("cgfast run: warning: saving the annotations")
    assert warning.endswith("its annotations are not saved")
    assert f"{out} is gone" in done.stderr


@pytest.mark.parametrize(
    "out,message",
    [
        ("missing/parent/out", "does not exist"),
        ("a_file", "not a directory"),
        ("/proc/cgfast-run-test", "cannot write there"),
    ],
)
def test_a_bad_out_is_one_line_before_the_program_starts(tmp_path, out, message):
    (tmp_path / "a_file").write_text("")
    marker = tmp_path / "ran"
    done = cgfast_run("--out", out, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')", cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith("cgfast run: error: --out") and message in line
    assert not marker.exists()


def test_no_command_and_a_missing_command(tmp_path):
    done = cgfast_run("--out", tmp_path / "out")
    assert done.returncode == 2 and "no command given" in done.stderr
    done = cgfast_run("--out", tmp_path / "out", "--", "no-such-command-cgfast")
    assert done.returncode == 127
    assert "cgfast run: error: no-such-command-cgfast: command not found" in done.stderr


def test_flags_turn_each_part_off(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    done = cgfast_run(
        "--out",
        tmp_path / "out",
        "--no-modules",
        "--",
        sys.executable,
        program("report_state.py"),
        results,
        "none",
    )
    assert done.returncode == 0, done.stderr
    (state,) = states(results)
    assert state["recording"] and not state["modules_named"]
    shutil.rmtree(results)
    results.mkdir()
    done = cgfast_run(
        "--out",
        tmp_path / "out",
        "--no-record",
        "--",
        sys.executable,
        program("report_state.py"),
        results,
        "none",
    )
    (state,) = states(results)
    assert not state["recording"] and not state["modules_named"] and state["exports_saved"]
    assert "recording only what the program asks for" in done.stderr


def test_the_standalone_binary_says_it_needs_the_package():
    if not CGFAST_BIN.exists():
        pytest.skip("the standalone binary is not built (cargo build --release)")
    done = subprocess.run([str(CGFAST_BIN), "run", "--", "python", "x.py"], capture_output=True, text=True)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "is the Python package's" in line


def test_an_engine_runs_untouched_with_its_output_its_own(tmp_path):
    """examples/engines/sglang_style.py on the CPU (no capture): its schedulers start
    under the hook, profile and export as they do alone, and nothing is written."""
    pytest.importorskip("transformers")
    traces = tmp_path / "traces"
    argv = [
        os.path.join(REPO, "examples", "engines", "sglang_style.py"),
        "--device",
        "cpu",
        "--schedulers",
        "2",
        "--start",
        "spawn",
        "--trace-dir",
        traces,
    ]
    alone = subprocess.run([sys.executable, *map(str, argv)], capture_output=True, text=True, timeout=240)
    assert alone.returncode == 0, alone.stderr
    done = cgfast_run("--out", tmp_path / "out", "--", sys.executable, *argv)
    assert done.returncode == 0, done.stderr
    assert done.stdout == alone.stdout
    assert len(list(traces.glob("*.pt.trace.json"))) == 4  # two schedulers, twice
    assert os.listdir(tmp_path / "out") == []


def test_stacks_record_the_launch_lines(tmp_path):
    out = tmp_path / "out"
    done = cgfast_run(
        "--out", out, "--stacks", "--", sys.executable, program("fake_capture.py"), tmp_path / "t.json"
    )
    assert done.returncode == 0, done.stderr
    (name,) = os.listdir(out)
    with open(out / name) as f:
        stacks = json.load(f)["stacks"]
    assert stacks and all(frames for frames in stacks.values())
    innermost = {frames[0].rsplit(":", 2)[0] for frames in stacks.values()}
    assert any(path.endswith(("fake_capture.py", "linear.py", "activation.py")) for path in innermost), (
        innermost
    )


def test_torch_compile_produces_the_same_under_cgfast_run(tmp_path):
    """Dynamo's counters (graphs, graph breaks, recompiles), Inductor's code once the
    toggle's brackets are taken out, and the outputs: the same with and without."""
    pytest.importorskip("transformers")
    argv = [sys.executable, program("compile_and_report.py")]

    def report(done):
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.splitlines()[-1])

    def cache(name):
        return {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / name)}

    plain = report(subprocess.run(argv, capture_output=True, text=True, timeout=600, env=cache("plain")))
    run = report(cgfast_run("--out", tmp_path / "out", "--", *argv, env=cache("run"), timeout=600))
    assert run["counters"] == plain["counters"] and plain["counters"]["stats"]["unique_graphs"] >= 1
    assert run["outputs"] == plain["outputs"]

    def without_brackets(code):
        return [
            line
            for line in code.splitlines()
            if "_annotation_ctx" not in line
            and "_mark_kernels" not in line
            and not line.startswith("# AOT ID")
        ]

    assert len(run["codes"]) == len(plain["codes"]) >= 2
    assert all("_mark_kernels" in code for code in run["codes"])  # the toggle was on
    assert [without_brackets(c) for c in run["codes"]] == [without_brackets(c) for c in plain["codes"]]


def profile_outputs(out):
    traces = sorted(p.name for p in out.glob("000000.*.pt.trace.json.gz"))
    annotated = sorted(p.name for p in out.glob("000000.*.pt.trace.annotated.json.gz"))
    return traces, annotated


def test_profile_window_is_profiled_annotated_and_summarized(tmp_path):
    out = tmp_path / "out"
    done = cgfast_run(
        "--out",
        out,
        "--profile",
        "--replays",
        3,
        "--skip",
        2,
        "--",
        sys.executable,
        program("fake_capture.py"),
        tmp_path / "t.json",
        "--replays",
        10,
        "--exit-without-export",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "program output\n"
    traces, annotated = profile_outputs(out)
    assert len(traces) == len(annotated) == 1
    (name,) = [p.name for p in out.glob("kernel_annotations_rank0_*.json")]
    with open(out / name) as f:
        assert json.load(f)["traces"] == [str(out / traces[0])]
    with gzip.open(out / traces[0], "rt") as f:
        stamps = [e for e in json.load(f)["traceEvents"] if e.get("name", "").startswith("cgfast.replay ")]
    assert len(stamps) == 3  # replays 3 to 5, each stamped with its graph
    lines = done.stderr.splitlines()
    status = lines.index("cgfast run: python exited with status 0")
    assert any(line.startswith("cgfast summary by args.module") for line in lines[status:])
    assert (
        f"  traces       1 annotated in {out}" in lines
        and f"  next         cgfast summary {out} --chart summary.html" in lines
    )


def test_a_program_profiling_itself_keeps_its_profiler(tmp_path):
    out = tmp_path / "out"
    done = cgfast_run(
        "--out",
        out,
        "--profile",
        "--skip",
        0,
        "--",
        sys.executable,
        program("fake_capture.py"),
        tmp_path / "own.json",
        "--replays",
        0,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "own.json").exists() and profile_outputs(out) == ([], [])
    assert "traces       none: no process replayed a graph" in done.stderr


@pytest.mark.parametrize("signum,status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_program_leaves_what_was_profiled_annotated(tmp_path, signum, status):
    out, marker = tmp_path / "out", tmp_path / "replaying"
    args = ["--out", out, "--profile", "--replays", 100000, "--skip", 5, "--"]
    program_argv = [sys.executable, program("fake_capture.py"), tmp_path / "t.json", "--forever", marker]
    proc = start_run([*args, *program_argv], marker)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err
    traces, annotated = profile_outputs(out)
    assert len(traces) == len(annotated) == 1, err
    assert f"exited with status {status}" in err and "traces       1 annotated" in err


def test_an_interpreter_without_cgfast_loads_the_runs_own_copy(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120
    )
    python = str(tmp_path / "venv" / "bin" / "python")
    alone = subprocess.run([python, "-c", "import cgfast"], capture_output=True, text=True)
    assert alone.returncode != 0  # cgfast is not installed there
    # the start-up hook ran before the program's first line: cgfast is loaded, from the run's copy
    script = "import sys; print(sys.modules['cgfast.run._process'].__file__)"
    done = cgfast_run("--out", tmp_path / "out", "--", python, "-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == os.path.join(os.path.dirname(cgfast.__file__), "run", "_process.py")
    assert "warning" not in done.stderr


def test_flops_count_each_ops_flops_and_bytes_on_its_kernels(tmp_path):
    out = tmp_path / "out"
    done = cgfast_run(
        "--out", out, "--flops", "--", sys.executable, program("fake_capture.py"), tmp_path / "t.json"
    )
    assert done.returncode == 0, done.stderr
    assert "FLOPs and bytes" in done.stderr
    (name,) = os.listdir(out)
    with open(out / name) as f:
        annotations = json.load(f)["annotations"]
    counts = [items[-1] for items in annotations.values()]
    assert all(set(c) == {"flops", "bytes"} for c in counts)
    # the two Linear layers' addmms: 2 * batch * in * out
    assert sum(c["flops"] for c in counts) == 2 * 2 * 8 * 8 + 2 * 2 * 8 * 4
    assert {items[0].get("module") for items in annotations.values()} >= {"0", "1", "2"}


def test_flops_turn_inductors_estimates_on_with_its_toggle(tmp_path):
    from cgfast.run._command import environment
    from cgfast.run._settings import RunSettings

    with_flops = environment(RunSettings(out=str(tmp_path), flops=True))
    assert with_flops["CGFAST_INDUCTOR_ANNOTATIONS"] == with_flops["CGFAST_INDUCTOR_FLOPS"] == "1"
    assert "CGFAST_INDUCTOR_FLOPS" not in environment(
        RunSettings(out=str(tmp_path), flops=True, inductor=False)
    )
