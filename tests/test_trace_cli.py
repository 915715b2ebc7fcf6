"""The ``cgfast`` command line: both forms (``cgfast annotate TRACE`` and ``cgfast TRACE``),
its flags, ``--json`` / ``--verbose`` / ``--recover``, the console script and
``python -m cgfast``, and ``import cgfast`` not importing torch."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cgfast
from helpers import (
    assert_clean_failure,
    check_output,
    check_report,
    expected_pipeline,
    gen_trace_module,
    generate,
    python_cli,
    run_cli,
    write_json_annotations,
    write_pickle_annotations,
)

ROOT = Path(__file__).resolve().parent.parent
CONSOLE_SCRIPT = Path(sys.executable).parent / "cgfast"

REPORT_KEYS = {
    "input",
    "output",
    "annotations",
    "annotations_loaded",
    "events",
    "annotated",
    "noise_removed",
    "metadata_removed",
    "moved",
    "fixed",
    "large_overlaps",
    "largest_overlap_us",
    "flows_moved",
    "lanes_named",
    "recovery",
    "input_bytes",
    "seconds",
    "mb_per_s",
}


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    ann = generate(d / "trace.json", target_mb=0.12, graphs=2, nodes=40, seed=5)
    write_json_annotations(d / "ann.json", ann)
    write_pickle_annotations(d / "ann.pkl", ann)
    return d, d / "trace.json", ann


def fresh(gen, tmp_path) -> tuple[Path, Path]:
    d, trace, _ = gen
    t = tmp_path / "trace.json"
    shutil.copyfile(trace, t)
    return t, d / "ann.json"


def test_both_forms_write_the_same(gen, tmp_path):
    trace, ann = fresh(gen, tmp_path)
    a = run_cli("annotate", trace, "-a", ann, "-o", tmp_path / "a.json")
    b = run_cli(trace, "--annotations", ann, "--output", tmp_path / "b.json")
    c = run_cli(trace, "-a", ann)  # default output name
    assert a.returncode == b.returncode == c.returncode == 0, (a.stderr, b.stderr, c.stderr)
    assert (
        (tmp_path / "a.json").read_bytes()
        == (tmp_path / "b.json").read_bytes()
        == (tmp_path / "trace.annotated.json").read_bytes()
    )
    assert a.stderr == b.stderr == c.stderr == ""


def test_output_to_a_device_or_pipe_is_written_in_place(gen, tmp_path):
    """`-o /dev/null` (or a named pipe) writes to it: renaming a finished temporary over it,
    as for a file, would replace the device with a file (and root may do that)."""
    import stat

    trace, ann = fresh(gen, tmp_path)
    proc = run_cli(trace, "-a", ann, "-o", "/dev/null")
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode), "/dev/null is still the device"
    assert not [p for p in os.listdir("/dev") if p.endswith(".partial")]

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = tmp_path / "received.json"
    with open(received, "wb") as sink:
        reader = subprocess.Popen(["cat", str(fifo)], stdout=sink)
        proc = run_cli(trace, "-a", ann, "-o", fifo)
        reader.wait(timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = received.read_bytes()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    expected = tmp_path / "expected.json"
    assert run_cli(trace, "-a", ann, "-o", expected).returncode == 0
    assert out == expected.read_bytes()


def test_summary_on_stdout(ref, gen, tmp_path):
    trace, ann = fresh(gen, tmp_path)
    proc = run_cli(trace, "-a", ann, "-o", tmp_path / "o.json")
    assert proc.returncode == 0 and proc.stderr == ""
    exp = expected_pipeline(ref, trace.read_text(), gen[2])
    out = proc.stdout
    assert "WARNING" not in out
    import re

    def number(label):
        m = re.search(rf"^\s+{label}\s+([\d,]+)", out, re.M)
        assert m, f"no {label!r} line in {out!r}"
        return int(m.group(1).replace(",", ""))

    assert number("annotated") == exp.run.annotated
    assert number("noise removed") == exp.run.noise_removed
    assert number("moved") == exp.run.moved
    assert number("fixed") == exp.run.fixed
    assert number("large overlaps") == len(exp.run.warnings)
    assert number("events") == len(exp.input_events)
    assert str(tmp_path / "o.json") in out


def test_json_report_is_one_object(ref, gen, tmp_path):
    trace, ann = fresh(gen, tmp_path)
    proc = run_cli(trace, "-a", ann, "--json", "-o", tmp_path / "o.json")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.count("\n") == 1 and proc.stdout.endswith("\n")
    report = json.loads(proc.stdout)
    assert set(report) >= REPORT_KEYS
    assert "overlaps" not in report
    exp = expected_pipeline(ref, trace.read_text(), gen[2])
    check_report(report, exp, trace=trace, output=tmp_path / "o.json", annotations=ann)
    assert report["seconds"] >= 0 and report["mb_per_s"] >= 0
    assert report["annotations_loaded"] == len(gen[2])


def test_verbose(ref, gen, tmp_path):
    trace, ann = fresh(gen, tmp_path)
    exp = expected_pipeline(ref, trace.read_text(), gen[2])
    assert exp.run.warnings
    plain = run_cli(trace, "-a", ann, "-o", tmp_path / "o.json")
    verbose = run_cli(trace, "-a", ann, "-o", tmp_path / "v.json", "--verbose")
    short = run_cli(trace, "-a", ann, "-o", tmp_path / "s.json", "-v")
    assert plain.returncode == verbose.returncode == short.returncode == 0
    assert "--verbose" in plain.stdout  # the hint
    assert len(verbose.stdout.splitlines()) == len(plain.stdout.splitlines()) + len(exp.run.warnings)
    assert len(short.stdout.splitlines()) == len(verbose.stdout.splitlines())
    assert (tmp_path / "o.json").read_bytes() == (tmp_path / "v.json").read_bytes()
    report = json.loads(run_cli(trace, "-a", ann, "-o", tmp_path / "j.json", "--json", "--verbose").stdout)
    assert len(report["overlaps"]) == len(exp.run.warnings)
    assert {"lane", "name", "ts", "overlap_us"} <= set(report["overlaps"][0])


@pytest.mark.parametrize(
    "flags,opts",
    [
        (["--default-stream", "143"], {"default_stream": 143}),
        (["--default-stream", "-1"], {"default_stream": -1}),
        (["--overlap-stream", "99"], {"overlap_stream": 99}),
        (["--max-adjust-us", "0"], {"max_adjust_us": 0.0}),
        (["--max-adjust-us", "2.5"], {"max_adjust_us": 2.5}),
        (
            ["--default-stream=20", "--overlap-stream=21", "--max-adjust-us=0.1"],
            {"default_stream": 20, "overlap_stream": 21, "max_adjust_us": 0.1},
        ),
    ],
)
def test_stream_and_adjust_flags(ref, gen, tmp_path, flags, opts):
    trace, ann = fresh(gen, tmp_path)
    proc = run_cli(trace, "-a", ann, "-o", tmp_path / "o.json", *flags)
    assert proc.returncode == 0, proc.stderr
    text = trace.read_text()
    exp = expected_pipeline(ref, text, gen[2], **opts)
    check_output(exp, text, (tmp_path / "o.json").read_text())


def test_flags_change_the_result(gen, tmp_path):
    # guards the test above against flags that are silently ignored
    trace, ann = fresh(gen, tmp_path)
    outs = {}
    for name, flags in {
        "default": [],
        "ds": ["--default-stream", "143"],
        "os": ["--overlap-stream", "99"],
        "ma": ["--max-adjust-us", "0"],
    }.items():
        assert run_cli(trace, "-a", ann, "-o", tmp_path / f"{name}.json", *flags).returncode == 0
        outs[name] = (tmp_path / f"{name}.json").read_bytes()
    assert len(set(outs.values())) == 4


def test_gzip_level(gen, tmp_path):
    trace, ann = fresh(gen, tmp_path)
    sizes = {}
    for level in (0, 1, 9):
        out = tmp_path / f"o{level}.json.gz"
        proc = run_cli(trace, "-a", ann, "-o", out, "--gzip-level", str(level))
        assert proc.returncode == 0, proc.stderr
        sizes[level] = out.stat().st_size
    contents = {gzip.decompress((tmp_path / f"o{lv}.json.gz").read_bytes()) for lv in sizes}
    assert len(contents) == 1
    assert sizes[0] > sizes[1] and sizes[0] > sizes[9]
    # the level has no effect on a plain output
    proc = run_cli(trace, "-a", ann, "-o", tmp_path / "plain.json", "--gzip-level", "9")
    assert proc.returncode == 0
    assert (tmp_path / "plain.json").read_bytes() == contents.pop()


@pytest.mark.parametrize(
    "flags",
    [
        ["--gzip-level", "10"],
        ["--gzip-level", "-1"],
        ["--max-adjust-us", "-1"],
        ["--max-adjust-us", "nan"],
        ["--max-adjust-us", "inf"],
        ["--max-adjust-us", "x"],
        ["--recover", "sometimes"],
        ["--default-stream", "1.5"],
        ["--no-such-flag"],
    ],
)
def test_bad_flags(gen, tmp_path, flags):
    trace, ann = fresh(gen, tmp_path)
    proc = run_cli(trace, "-a", ann, "-o", tmp_path / "o.json", *flags)
    assert proc.returncode in (1, 2), proc
    assert "panic" not in proc.stderr.lower() and "Traceback" not in proc.stderr
    assert proc.stderr.strip()
    assert not (tmp_path / "o.json").exists()
    assert not (tmp_path / "trace.annotated.json").exists()


def test_no_arguments():
    proc = run_cli()
    assert proc.returncode == 2 and proc.stderr.strip() and "panic" not in proc.stderr.lower()


def test_help_and_version():
    for args in (["--help"], ["annotate", "--help"], ["help"]):
        proc = run_cli(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert "annotate" in proc.stdout or "TRACE" in proc.stdout
    annotate_help = run_cli("annotate", "--help").stdout
    for flag in (
        "--annotations",
        "--output",
        "--default-stream",
        "--overlap-stream",
        "--max-adjust-us",
        "--json",
        "--verbose",
        "--recover",
        "--gzip-level",
        "--no-progress",
    ):
        assert flag in annotate_help
    proc = run_cli("--version")
    assert proc.returncode == 0 and cgfast.__version__ in proc.stdout


def test_no_progress(gen, tmp_path):
    trace, ann = fresh(gen, tmp_path)
    a = run_cli(trace, "-a", ann, "-o", tmp_path / "a.json", "--no-progress")
    b = run_cli(trace, "-a", ann, "-o", tmp_path / "b.json")
    assert a.returncode == b.returncode == 0 and a.stderr == b.stderr == ""
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


# --------------------------------------------------------------------------- --recover


def _no_id_trace(directory: Path):
    gt = gen_trace_module()
    try:
        result = gt.generate(directory / "noid.json", 0.08, 2, 30, 3, node_ids=False)
    except TypeError:
        pytest.skip("bench/gen_trace.py cannot write traces without graph node ids")
    if not isinstance(result, tuple):
        pytest.skip("bench/gen_trace.py returns no graph topology")
    ann, topology = result
    cgfast.save_annotations(directory / "topo.json", ann, graphs=topology)
    return directory / "noid.json", directory / "topo.json", ann


def test_recover_never_is_the_reference(ref, tmp_path):
    trace, ann_path, ann = _no_id_trace(tmp_path)
    proc = run_cli(trace, "-a", ann_path, "-o", tmp_path / "o.json", "--recover", "never", "--json")
    assert proc.returncode == 0, proc.stderr
    text = trace.read_text()
    exp = expected_pipeline(ref, text, ann)
    check_output(exp, text, (tmp_path / "o.json").read_text())
    report = json.loads(proc.stdout)
    assert report["annotated"] == 0 and report["recovery"]["recovered_events"] == 0


@pytest.mark.parametrize("mode", ["auto", "always"])
def test_recover_modes_recover_node_ids(tmp_path, mode):
    trace, ann_path, _ann = _no_id_trace(tmp_path)
    proc = run_cli(trace, "-a", ann_path, "-o", tmp_path / "o.json", "--recover", mode, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["recovery"]["recovered_events"] > 0 and report["annotated"] > 0
    assert (
        cgfast.annotate_file(trace, ann_path, tmp_path / "p.json", recover=mode)["annotated"]
        == report["annotated"]
    )
    assert (tmp_path / "o.json").read_bytes() == (tmp_path / "p.json").read_bytes()


def test_recovered_ids_are_the_ids_the_profiler_would_have_written(tmp_path):
    gt = gen_trace_module()
    ann, topology = gt.generate(tmp_path / "ids.json", 0.08, 2, 30, 3, node_ids=True)
    trace = json.loads((tmp_path / "ids.json").read_text())
    truth = []
    for event in trace["traceEvents"]:
        node = event.get("args", {}).pop("graph node id", None) if isinstance(event, dict) else None
        truth.append(node)
    (tmp_path / "noid.json").write_text(json.dumps(trace))
    cgfast.save_annotations(tmp_path / "topo.json", ann, graphs=topology)
    proc = run_cli(
        tmp_path / "noid.json",
        "-a",
        tmp_path / "topo.json",
        "-o",
        tmp_path / "o.json",
        "--json",
        "--max-adjust-us",
        "0",
    )
    assert proc.returncode == 0, proc.stderr
    recovery = json.loads(proc.stdout)["recovery"]
    graphed = [n for n in truth if n]
    assert recovery["recovered_events"] == len(graphed) > 100, recovery
    assert recovery["unresolved_events"] == 0
    # With --max-adjust-us 0 no start moves: an event is its name, replay and times.
    recovered = cgfast.annotate_file(
        tmp_path / "noid.json", tmp_path / "topo.json", tmp_path / "p.json", recover="always"
    )
    assert recovered["recovery"]["recovered_events"] == len(graphed)
    by_place = {}
    for event in json.loads((tmp_path / "o.json").read_text())["traceEvents"]:
        if event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "graph node id" in event["args"]:
            by_place[(event["name"], event["args"]["correlation"], event["ts"], event["dur"])] = event[
                "args"
            ]["graph node id"]
    expected = {}
    for event, node in zip(trace["traceEvents"], truth):
        if node:
            expected[(event["name"], event["args"]["correlation"], event["ts"], event["dur"])] = node
    assert len(expected) == len(graphed)
    assert by_place.keys() == expected.keys()
    wrong = {k: (v, expected[k]) for k, v in by_place.items() if v != expected[k]}
    assert not wrong, list(wrong.items())[:5]


@pytest.mark.parametrize("mode", ["auto", "always", "never"])
def test_recover_modes_agree_when_ids_are_present(gen, tmp_path, mode):
    trace, ann = fresh(gen, tmp_path)
    assert run_cli(trace, "-a", ann, "-o", tmp_path / "ref.json").returncode == 0
    assert run_cli(trace, "-a", ann, "-o", tmp_path / "m.json", "--recover", mode).returncode == 0
    assert (tmp_path / "m.json").read_bytes() == (tmp_path / "ref.json").read_bytes()


def test_annotate_file_rejects_bad_options(gen, tmp_path):
    trace, ann = fresh(gen, tmp_path)
    for kw in (
        {"recover": "sometimes"},
        {"gzip_level": 10},
        {"max_adjust_us": -1.0},
        {"max_adjust_us": float("nan")},
    ):
        with pytest.raises((ValueError, TypeError, OverflowError)):
            cgfast.annotate_file(trace, ann, tmp_path / "o.json", **kw)
        assert not (tmp_path / "o.json").exists()


# --------------------------------------------------------------------------- entry points


def test_console_script(gen, tmp_path):
    if not CONSOLE_SCRIPT.exists():
        pytest.skip(f"no console script at {CONSOLE_SCRIPT} (editable install missing)")
    trace, ann = fresh(gen, tmp_path)
    a = run_cli(trace, "-a", ann, "-o", tmp_path / "a.json", "--json", command=[str(CONSOLE_SCRIPT)])
    b = run_cli("annotate", trace, "-a", ann, "-o", tmp_path / "b.json", "--json", command=python_cli())
    c = run_cli(trace, "-a", ann, "-o", tmp_path / "c.json", "--json")
    for p in (a, b, c):
        assert p.returncode == 0, p.stderr
    assert (
        (tmp_path / "a.json").read_bytes()
        == (tmp_path / "b.json").read_bytes()
        == (tmp_path / "c.json").read_bytes()
    )

    def strip(r):
        return {k: v for k, v in json.loads(r.stdout).items() if k not in ("output", "seconds", "mb_per_s")}

    assert strip(a) == strip(b) == strip(c)
    for args in (["--version"], ["--help"]):
        assert run_cli(*args, command=[str(CONSOLE_SCRIPT)]).returncode == 0
    bad = run_cli(tmp_path / "missing.json", "-a", ann, command=[str(CONSOLE_SCRIPT)])
    assert_clean_failure(bad, mention="missing.json")


def test_python_m_cgfast_statuses(tmp_path):
    assert run_cli("--version", command=python_cli()).returncode == 0
    assert run_cli(command=python_cli()).returncode == 2
    assert run_cli("--bogus", command=python_cli()).returncode == 2


def test_run_cli_in_process_returns_the_status(gen, tmp_path):
    trace, ann = fresh(gen, tmp_path)
    from cgfast._cgfast import run_cli

    assert run_cli(["cgfast", str(trace), "-a", str(ann), "-o", str(tmp_path / "o.json"), "--json"]) == 0
    assert (tmp_path / "o.json").exists()
    assert run_cli(["cgfast", str(tmp_path / "missing.json"), "-a", str(ann)]) == 1


def _python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT
    )


def test_import_cgfast_does_not_import_torch(gen, tmp_path):
    trace, ann = fresh(gen, tmp_path)
    code = f"""
import sys
import time
import cgfast
assert "torch" not in sys.modules, "import cgfast imported torch"
trace = {{"traceEvents": [{{"ph": "X", "cat": "kernel", "tid": 7, "ts": 1, "dur": 1, "args": {{"graph node id": 5}}}}]}}
cgfast.annotate_trace(trace, {{5: ["x"]}})
cgfast.move_overlapping_to_stream(trace)
cgfast.fix_overlapping_timestamps(trace)
cgfast.annotate_file({str(trace)!r}, {str(ann)!r}, {str(tmp_path / "o.json")!r})
cgfast.load_annotations({str(ann)!r})
import cgfast.annotations
bad = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
assert not bad, bad
print("ok")
"""
    proc = _python(code)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_python_m_cgfast_does_not_import_torch(tmp_path):
    code = "import runpy, sys\nsys.argv = ['cgfast', '--version']\ntry:\n    runpy.run_module('cgfast', run_name='__main__')\nexcept SystemExit as e:\n    assert e.code == 0, e.code\nassert 'torch' not in sys.modules\nprint('ok')"
    proc = _python(code)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr


def test_reported_seconds_include_loading_the_annotations(tmp_path):
    # a tiny trace and a large annotation file: the run is mostly the loading
    trace = tmp_path / "t.json"
    trace.write_text(
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "args": {"graph node id": 5}}]}'
    )
    ann = write_json_annotations(
        tmp_path / "a.json", {n: [{"name": f"layers.{n}.mlp", "layer": n}] for n in range(1, 400_000)}
    )
    started = time.perf_counter()
    proc = run_cli(trace, "-a", ann, "-o", tmp_path / "o.json", "--json")
    wall = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["seconds"] >= wall / 2, f"the whole run took {wall:.3f} s"
    started = time.perf_counter()
    report = cgfast.annotate_file(trace, ann, tmp_path / "o2.json")
    wall = time.perf_counter() - started
    assert report["seconds"] >= wall / 2, f"the whole call took {wall:.3f} s"
