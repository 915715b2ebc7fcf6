"""The file pipeline (``cgfast annotate`` / ``cgfast.annotate_file``) against the
reference pipeline (annotate_trace -> _move_overlapping_to_stream ->
_fix_overlapping_timestamps) plus cgfast's three fixes; see ``helpers.expected_pipeline``.

Events no pass touches must be copied byte for byte; the rest must equal the expected
result as parsed JSON (same events, same order, same number types)."""

from __future__ import annotations

import collections
import contextlib
import gzip
import json
import os
import pickle
import random
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cgfast
from helpers import (
    TraceError,
    annotations_for_reference,
    assert_clean_failure,
    check_output,
    check_report,
    expected_pipeline,
    generate,
    leftovers,
    load_json,
    read_text,
    run_cli,
    split_events,
    strict,
    write_json_annotations,
    write_pickle_annotations,
)

WORK = {"kernel", "gpu_memcpy", "gpu_memset"}


# =========================================================================== helpers


def run_pipeline(ref, trace: Path, annotations: Path, output: Path, *, cli=True, extra=(), **opts):
    """Run cgfast on files, build the expected result, compare; returns (report, expected)."""
    text = read_text(trace)
    exp = expected_pipeline(
        ref,
        text,
        annotations_for_reference(annotations),
        **{k: v for k, v in opts.items() if k != "gzip_level"},
    )
    if cli:
        flags = []
        for k, v in opts.items():
            flags += ["--" + k.replace("_", "-"), str(v)]
        proc = run_cli("annotate", trace, "-a", annotations, "-o", output, "--json", *flags, *extra)
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
    else:
        report = cgfast.annotate_file(trace, annotations, output, **opts)
    check_output(exp, text, read_text(output))
    check_report(report, exp, trace=trace, output=output, annotations=annotations)
    return report, exp


@contextlib.contextmanager
def captured_fd1():
    """Capture what is written to file descriptor 1 (Rust prints there, not sys.stdout)."""
    sys.stdout.flush()
    saved = os.dup(1)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 1)
        box = {}
        try:
            yield box
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
            tmp.seek(0)
            box["out"] = tmp.read().decode()


# =========================================================================== gen_trace inputs


@pytest.fixture(scope="session")
def gen_traces(tmp_path_factory):
    """seed -> (directory, trace.json, annotations dict); small traces (~150 kB)."""
    out = {}
    for seed in (0, 1, 2):
        d = tmp_path_factory.mktemp(f"gen{seed}")
        ann = generate(d / "trace.json", target_mb=0.15, graphs=2, nodes=40, seed=seed)
        write_json_annotations(d / "kernel_annotations_rank0_1.json", ann)
        write_pickle_annotations(d / "kernel_annotations_rank0_1.pkl", ann)
        out[seed] = (d, d / "trace.json", ann)
    return out


@pytest.mark.parametrize(
    "seed,gz_in,gz_out,kind",
    [
        (0, False, False, "json"),
        (1, True, False, "pkl"),
        (2, False, True, "json"),
        (0, True, True, "pkl"),
        (1, False, False, "json.gz"),
    ],
)
def test_gen_trace_matches_the_expected_pipeline(ref, gen_traces, tmp_path, seed, gz_in, gz_out, kind):
    d, trace, ann = gen_traces[seed]
    if gz_in:
        src = tmp_path / "trace.json.gz"
        src.write_bytes(gzip.compress(trace.read_bytes(), compresslevel=1))
    else:
        src = trace
    if kind == "json.gz":
        annotations = write_json_annotations(tmp_path / "ann.json.gz", ann, gz=True)
    else:
        annotations = d / f"kernel_annotations_rank0_1.{kind}"
    output = tmp_path / ("out.json.gz" if gz_out else "out.json")
    _report, exp = run_pipeline(ref, src, annotations, output)
    assert (output.read_bytes()[:2] == b"\x1f\x8b") == gz_out, "gzip is chosen by the output's suffix"
    # the synthetic trace exercises every pass
    assert (
        exp.run.annotated and exp.run.moved and exp.run.fixed and exp.run.noise_removed and exp.run.warnings
    )
    assert leftovers(tmp_path) == []


def test_gen_trace_through_annotate_file(ref, gen_traces, tmp_path):
    d, trace, _ann = gen_traces[2]
    with captured_fd1() as box:
        report, exp = run_pipeline(
            ref, trace, d / "kernel_annotations_rank0_1.pkl", tmp_path / "o.json", cli=False
        )
    assert "overlaps" in report and len(report["overlaps"]) == len(exp.run.warnings) > 0
    assert "WARNING" not in box["out"], "large overlaps are counted, not printed one per line"


def test_annotate_file_takes_a_mapping(ref, gen_traces, tmp_path):
    _d, trace, ann = gen_traces[0]
    text = trace.read_text()
    report = cgfast.annotate_file(str(trace), ann, tmp_path / "o.json")
    exp = expected_pipeline(ref, text, ann)
    check_output(exp, text, (tmp_path / "o.json").read_text())
    assert report["annotated"] == exp.run.annotated


@pytest.mark.parametrize(
    "opts",
    [
        {"default_stream": 143},
        {"overlap_stream": 99},
        {"max_adjust_us": 0.0},
        {"max_adjust_us": 5.0},
        {"default_stream": 0, "overlap_stream": 7},
    ],
)
def test_gen_trace_with_options(ref, gen_traces, tmp_path, opts):
    d, trace, _ann = gen_traces[1]
    run_pipeline(ref, trace, d / "kernel_annotations_rank0_1.json", tmp_path / "o.json", **opts)


def test_gen_trace_options_through_annotate_file(ref, gen_traces, tmp_path):
    d, trace, _ann = gen_traces[0]
    run_pipeline(
        ref,
        trace,
        d / "kernel_annotations_rank0_1.json",
        tmp_path / "o.json.gz",
        cli=False,
        default_stream=143,
        overlap_stream=9,
        max_adjust_us=0.5,
        gzip_level=9,
    )


@pytest.mark.parametrize("out_name", ["o.json", "o.json.gz"])
def test_medium_trace(ref, tmp_path_factory, out_name):
    """A few MB, so that the streaming reader and writer go through many buffers."""
    d = tmp_path_factory.getbasetemp() / "medium"
    if not (d / "trace.json").exists():
        d.mkdir(exist_ok=True)
        ann = generate(d / "trace.json", target_mb=2.5, graphs=3, nodes=60, seed=11)
        write_pickle_annotations(d / "ann.pkl", ann)
    out = d / out_name
    run_pipeline(ref, d / "trace.json", d / "ann.pkl", out)


# --------------------------------------------------------------------------- fix 1: flows


def flows_at_kernels(events) -> tuple[int, int]:
    places = {
        (e.get("pid"), e.get("tid"), e.get("ts"))
        for e in events
        if isinstance(e, dict) and e.get("cat") in WORK
    }
    flows = [e for e in events if isinstance(e, dict) and e.get("cat") == "ac2g" and e.get("ph") == "f"]
    return sum((f.get("pid"), f.get("tid"), f.get("ts")) in places for f in flows), len(flows)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_flows_sit_at_their_kernels_final_place(ref, gen_traces, tmp_path, seed):
    d, trace, ann = gen_traces[seed]
    out = tmp_path / "o.json"
    proc = run_cli(trace, "-a", d / "kernel_annotations_rank0_1.json", "-o", out, "--spans", "none")
    assert proc.returncode == 0, proc.stderr
    exp = expected_pipeline(ref, trace.read_text(), ann)
    ours = load_json(out)["traceEvents"]
    ours_at, _ours_total = flows_at_kernels(ours)
    ref_at, ref_total = flows_at_kernels(exp.ref_events)
    assert ours_at >= ref_at
    assert ref_at < ref_total, "premise: the reference loses flows when kernels move after annotate"
    assert ours_at > ref_at

    # every input flow at a graphed work event's place ends at that event's final place
    inp = json.loads(trace.read_text())["traceEvents"]
    graphed_at = collections.defaultdict(list)
    for i, e in enumerate(inp):
        if e.get("cat") in WORK and e.get("args", {}).get("graph node id", 0) not in (0, None):
            graphed_at[(e.get("pid"), e.get("tid"), e.get("ts"))].append(i)
    # find each input event in the output through the expected pipeline's order
    assert len(ours) == len(exp.origin)
    final = {i: ours[pos] for pos, i in enumerate(exp.origin) if i is not None}
    checked = 0
    for i, e in enumerate(inp):
        if e.get("cat") == "ac2g" and e.get("ph") == "f":
            homes = graphed_at.get((e.get("pid"), e.get("tid"), e.get("ts")))
            if homes:
                assert i in final, f"flow {i} at a graphed kernel's place was dropped"
                f = final[i]
                assert any(
                    (f["pid"], f["tid"], f["ts"]) == (final[h]["pid"], final[h]["tid"], final[h]["ts"])
                    for h in homes
                ), (e, f)
                checked += 1
    assert checked > 100


# --------------------------------------------------------------------------- fix 2: lane names


@pytest.mark.parametrize("seed", [0, 2])
def test_every_work_lane_is_named(ref, gen_traces, tmp_path, seed):
    d, trace, ann = gen_traces[seed]
    out = tmp_path / "o.json.gz"
    proc = run_cli(trace, "-a", d / "kernel_annotations_rank0_1.pkl", "-o", out, "--spans", "none")
    assert proc.returncode == 0, proc.stderr
    events = load_json(out)["traceEvents"]
    work = {e["tid"] for e in events if e.get("cat") in WORK}
    named = {e["tid"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert 8 in work and work <= named
    exp = expected_pipeline(ref, trace.read_text(), ann)
    ref_named = {e["tid"] for e in exp.ref_events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    assert 8 not in ref_named, "premise: the reference leaves the overlap lane unnamed"
    # the overlap lane's name comes after the reference's own appended names, with the GPU pid
    assert events[-1] == {"ph": "M", "pid": 0, "tid": 8, "name": "thread_name", "args": {"name": "stream 8"}}


# --------------------------------------------------------------------------- fix 3: summaries


def test_large_overlaps_are_summarised(ref, gen_traces, tmp_path):
    d, trace, ann = gen_traces[0]
    exp = expected_pipeline(ref, trace.read_text(), ann)
    assert len(exp.run.warnings) >= 2
    proc = run_cli(trace, "-a", d / "kernel_annotations_rank0_1.json", "-o", tmp_path / "o.json")
    assert proc.returncode == 0
    assert "WARNING" not in proc.stdout and "WARNING" not in proc.stderr
    assert re.search(rf"large overlaps\s+{len(exp.run.warnings)}\b", proc.stdout), proc.stdout
    proc = run_cli(trace, "-a", d / "kernel_annotations_rank0_1.json", "-o", tmp_path / "o.json", "--verbose")
    listed = [line for line in proc.stdout.splitlines() if re.match(r"\s+lane\s", line)]
    assert len(listed) == len(exp.run.warnings)
    proc = run_cli(
        trace, "-a", d / "kernel_annotations_rank0_1.json", "-o", tmp_path / "o.json", "--verbose", "--json"
    )
    report = json.loads(proc.stdout)
    check_report(report, exp, trace=trace, output=tmp_path / "o.json")


# =========================================================================== default output names


# one graphed kernel of node 5: the trace the output-name and discovery tests write
ONE_KERNEL_TRACE = json.dumps(
    {
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "pid": 0, "tid": 7, "ts": 1, "dur": 1, "args": {"graph node id": 5}}
        ]
    }
).encode()


def reference_output_name(ref_path: Path, tmp: Path, name: str) -> tuple[str, bool]:
    """Run the reference CLI itself and see what it writes (its name and whether gzipped)."""
    d = tmp / "ref"
    d.mkdir()
    trace = d / name
    body = ONE_KERNEL_TRACE
    is_gz = name.endswith(".gz")
    trace.write_bytes(gzip.compress(body) if is_gz else body)
    with open(d / "a.pkl", "wb") as f:
        pickle.dump({5: [{"name": "x"}]}, f)
    before = set(os.listdir(d))
    proc = subprocess.run(
        [sys.executable, str(ref_path), name, "-a", "a.pkl"],
        cwd=d,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    (created,) = set(os.listdir(d)) - before
    gz = (d / created).read_bytes()[:2] == b"\x1f\x8b"
    shutil.rmtree(d)
    return created, gz


@pytest.mark.parametrize(
    "name",
    [
        "t.json",
        "t.json.gz",
        "000000.1234.pt.trace.json.gz",
        "a.b.json",
        "t.gz",
        "t",
        "t.",
        ".hidden",
        "x.json.gz.json.gz",
        "t.JSON",
        "t.trace",
        "t.json.bak",
        "ünï code.json",
    ],
)
def test_default_output_name_is_the_references(ref, tmp_path, name):
    import torch_reference

    want, want_gz = reference_output_name(torch_reference.reference_path(), tmp_path, name)
    d = tmp_path / "ours"
    d.mkdir()
    body = ONE_KERNEL_TRACE
    (d / name).write_bytes(gzip.compress(body) if name.endswith(".gz") else body)
    write_json_annotations(tmp_path / "a.json", {5: [{"name": "x"}]})
    before = set(os.listdir(d))
    proc = run_cli(name, "-a", tmp_path / "a.json", "--json", cwd=d)
    assert proc.returncode == 0, proc.stderr
    created = set(os.listdir(d)) - before
    assert created == {want}
    assert ((d / want).read_bytes()[:2] == b"\x1f\x8b") == want_gz
    assert json.loads(proc.stdout)["output"] == want
    # and annotate_file picks the same name
    os.remove(d / want)
    report = cgfast.annotate_file(d / name, tmp_path / "a.json")
    assert report["output"] == str(d / want) and (d / want).exists()


def test_gzip_input_is_recognised_by_content(ref, tmp_path):
    text = json.dumps(
        {
            "traceEvents": [
                {
                    "ph": "X",
                    "cat": "kernel",
                    "pid": 0,
                    "tid": 7,
                    "ts": 1,
                    "dur": 1,
                    "args": {"graph node id": 5},
                }
            ]
        }
    )
    (tmp_path / "t.json").write_bytes(gzip.compress(text.encode()))  # gzipped but named .json
    (tmp_path / "u.json.gz").write_text(text)  # plain but named .json.gz
    write_json_annotations(tmp_path / "a.json", {5: [{"name": "x"}]})
    for name, out in (("t.json", "t.annotated.json"), ("u.json.gz", "u.annotated.json.gz")):
        proc = run_cli(tmp_path / name, "-a", tmp_path / "a.json")
        assert proc.returncode == 0, proc.stderr
        data = (tmp_path / out).read_bytes()
        assert (data[:2] == b"\x1f\x8b") == out.endswith(".gz")
        exp = expected_pipeline(ref, text, {5: [{"name": "x"}]})
        check_output(exp, text, read_text(tmp_path / out))


# =========================================================================== auto-discovery


def discovery_layout(root: Path, trace_name="000000.1234.pt.trace.json.gz", files=(), beside=()):
    step = root / "traces" / "step_000000000014"
    step.mkdir(parents=True)
    trace = step / trace_name
    body = ONE_KERNEL_TRACE
    trace.write_bytes(gzip.compress(body))
    for directory, names in ((root / "traces", files), (step, beside)):
        for n in names:
            ann = {5: [{"name": n, "stream": 60}]}
            if n.endswith(".pkl"):
                write_pickle_annotations(directory / n, ann)
            else:
                write_json_annotations(directory / n, ann, gz=n.endswith(".gz"))
    return trace


@pytest.mark.parametrize(
    "trace_name,files,beside,want",
    [
        (
            "000000.1234.pt.trace.json.gz",
            ["kernel_annotations_rank0_1.pkl", "kernel_annotations_rank0_1.json"],
            [],
            "traces/kernel_annotations_rank0_1.json",
        ),
        (
            "000000.1234.pt.trace.json.gz",
            ["kernel_annotations_rank0_1.pkl"],
            [],
            "traces/kernel_annotations_rank0_1.pkl",
        ),
        (
            "000000.1234.pt.trace.json.gz",
            ["kernel_annotations_rank0_2.pkl", "kernel_annotations_rank0_1.pkl"],
            [],
            "traces/kernel_annotations_rank0_1.pkl",
        ),
        (
            "000001.1234.pt.trace.json.gz",
            ["kernel_annotations_rank0_1.json", "kernel_annotations_rank1_7.pkl"],
            [],
            "traces/kernel_annotations_rank1_7.pkl",
        ),
        (
            "000010.1234.pt.trace.json.gz",
            ["kernel_annotations_rank1_7.json", "kernel_annotations_rank10_7.pkl"],
            [],
            "traces/kernel_annotations_rank10_7.pkl",
        ),
        (
            "3.trace.json.gz",
            ["kernel_annotations_rank3_0.json"],
            [],
            "traces/kernel_annotations_rank3_0.json",
        ),
        (
            "000000.1234.pt.trace.json.gz",
            [],
            ["kernel_annotations_rank0_1.json"],
            "traces/step_000000000014/kernel_annotations_rank0_1.json",
        ),
        (
            "000000.1234.pt.trace.json.gz",
            [],
            ["kernel_annotations_rank0_1.pkl"],
            "traces/step_000000000014/kernel_annotations_rank0_1.pkl",
        ),
    ],
)
def test_annotations_are_discovered(ref, tmp_path, trace_name, files, beside, want):
    trace = discovery_layout(tmp_path, trace_name, files, beside)
    proc = run_cli(trace, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert Path(report["annotations"]) == tmp_path / want
    assert report["annotated"] == 1
    out = load_json(Path(report["output"]))
    kernel = out["traceEvents"][0]
    assert kernel["args"]["name"] == Path(want).name and kernel["tid"] == 60
    if want.endswith(".pkl") and "step_" not in want:
        # the reference finds the same pickle
        assert ref._find_annotations_pkl(trace) == tmp_path / want
    # annotate_file discovers the same file
    assert Path(cgfast.annotate_file(trace, output=tmp_path / "o.json")["annotations"]) == tmp_path / want


@pytest.mark.parametrize(
    "trace_name,files",
    [
        ("000000.1.pt.trace.json.gz", []),
        ("000001.1.pt.trace.json.gz", ["kernel_annotations_rank0_1.json"]),
        ("trace.json.gz", ["kernel_annotations_rank0_1.json"]),
    ],
)
def test_nothing_to_discover(tmp_path, trace_name, files):
    trace = discovery_layout(tmp_path, trace_name, files)
    proc = run_cli(trace)
    assert_clean_failure(proc, mention=trace.name)
    assert not any(p.name.endswith((".annotated.json.gz", ".partial")) for p in tmp_path.rglob("*"))
    with pytest.raises(TraceError):
        cgfast.annotate_file(trace)


# =========================================================================== real H200 traces


@pytest.mark.parametrize("extra", [(), ("--recover", "never")])
def test_real_traces_equal_the_reference(ref, h200, tmp_path, extra):
    ann = {8589934592: [{"name": "x", "stream": 60}], 5: ["label"]}
    annotations = write_json_annotations(tmp_path / "ann.json", ann)
    for fixture in h200:
        trace = tmp_path / fixture.name
        shutil.copyfile(fixture, trace)
        proc = run_cli(trace, "-a", annotations, "--json", *extra)
        assert proc.returncode == 0, proc.stderr
        out = tmp_path / fixture.name.replace(".json.gz", ".annotated.json.gz")
        assert out.exists() and out.read_bytes()[:2] == b"\x1f\x8b"
        text = read_text(trace)
        exp = expected_pipeline(ref, text, ann)
        out_text = read_text(out)
        check_output(exp, text, out_text)
        # no graph node ids: none of cgfast's fixes applies, the output is the reference's
        got = json.loads(out_text)["traceEvents"]
        assert [strict(e) for e in got] == [strict(e) for e in exp.ref_events]
        report = json.loads(proc.stdout)
        check_report(report, exp, trace=trace, output=out, annotations=annotations)
        assert report["annotated"] == 0 and report["moved"] == 0 and report["fixed"] == 0


def test_real_traces_with_a_pickle(ref, h200, tmp_path):
    ann = collections.defaultdict(list, {1: [{"a": 1}]})
    annotations = write_pickle_annotations(tmp_path / "ann.pkl", dict(ann), default_dict=True)
    for fixture in h200:
        out = tmp_path / (fixture.name + ".out.json")
        report = cgfast.annotate_file(fixture, annotations, out)
        text = read_text(fixture)
        exp = expected_pipeline(ref, text, ann)
        check_output(exp, text, out.read_text())
        check_report(report, exp, trace=fixture, output=out, annotations=annotations)


# =========================================================================== hand-written file cases


def K(tid, ts, node=None, dur=1, pid=0, name="k", cat="kernel", **args):
    a = dict(args)
    if node is not None:
        a["graph node id"] = node
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": a}


def F(tid, ts, pid=0, ident=1):
    return {
        "ph": "f",
        "id": ident,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "cat": "ac2g",
        "name": "ac2g",
        "bp": "e",
    }


def TN(tid, pid=0):
    return {
        "name": "thread_name",
        "ph": "M",
        "ts": 0,
        "pid": pid,
        "tid": tid,
        "args": {"name": f"stream {tid} "},
    }


def file_case(
    ref,
    tmp_path,
    events,
    annotations,
    *,
    raw_annotations=None,
    top_before="",
    top_after="",
    ann_kind="json",
    **opts,
):
    """Write events (dicts, or raw JSON text) as a trace; run annotate_file; compare."""
    body = ",\n".join(e if isinstance(e, str) else json.dumps(e) for e in events)
    text = "{" + top_before + '"traceEvents": [' + body + "]" + top_after + "}\n"
    trace = tmp_path / "t.json"
    trace.write_text(text, encoding="utf-8")
    if ann_kind == "pkl":
        ann_path = write_pickle_annotations(tmp_path / "a.pkl", annotations)
        ref_ann = annotations
    elif raw_annotations is not None:
        ann_path = tmp_path / "a.json"
        ann_path.write_text(raw_annotations)
        ref_ann = annotations_for_reference(ann_path)
    else:
        ann_path = write_json_annotations(tmp_path / "a.json", annotations)
        ref_ann = annotations_for_reference(ann_path)
    exp = expected_pipeline(ref, text, ref_ann, **{k: v for k, v in opts.items() if k != "gzip_level"})
    out = tmp_path / "o.json"
    report = cgfast.annotate_file(trace, ann_path, out, **opts)
    check_output(exp, text, out.read_text(encoding="utf-8"))
    check_report(report, exp, trace=trace, output=out, annotations=ann_path)
    return json.loads(out.read_text(encoding="utf-8"))["traceEvents"], report


def test_flow_follows_its_kernel_through_all_moves(ref, tmp_path):
    events = [
        TN(7),
        K(7, 0, node=1, dur=10),
        F(7, 0),
        K(7, 5, node=2, dur=1),  # overlaps: to lane 8
        F(7, 5),
        K(7, 9.5, node=3),  # overlaps too: lane 8
        F(7, 9.5),
        K(143, 1, node=4),  # annotated to lane 60
        F(143, 1),
        K(61, 0, node=7, dur=10),
        F(61, 0),
        K(61, 9.5, node=8),  # jitter on lane 61: ts fixed to 10
        F(61, 9.5),
    ]
    got, report = file_case(
        ref, tmp_path, events, {4: [{"stream": 60}], 7: [{"stream": 61}], 8: [{"stream": "61"}]}
    )
    flows = [e for e in got if e.get("ph") == "f"]
    assert [(f["tid"], f["ts"]) for f in flows] == [(7, 0), (8, 5), (8, 9.5), (60, 1), (61, 0), (61, 10)]
    assert report["flows_moved"] == 4


def test_flow_at_a_kernel_of_another_pid_moves_like_the_reference(ref, tmp_path):
    # The reference indexes flows by (tid, ts) only: a flow of another pid at the
    # kernel's (tid, ts) moves with it in annotate_trace (and so stays out of the noise).
    # Fix 1 is about flows at a work event's (pid, tid, ts); everything else must be the
    # reference's.
    events = [TN(7), K(7, 10, node=5), F(7, 10, pid=3), K(7, 20), F(7, 20)]
    file_case(ref, tmp_path, events, {5: [{"stream": 60}]})


def test_flow_at_a_kernel_of_another_pid_is_not_noise(ref, tmp_path):
    events = [TN(7), K(7, 10, node=5), F(7, 10, pid=3)]
    file_case(ref, tmp_path, events, {5: [{"stream": 60}]})


def test_flow_follows_a_kernel_with_null_graph_node_id(ref, tmp_path):
    # graph node id null: annotate_trace skips it, the two lane passes do not; the flow
    # at it must end at its final place (the overlap lane here)
    events = [TN(7), K(7, 0, node=1, dur=10), F(7, 0), K(7, 5, node=None), F(7, 5)]
    events[3]["args"]["graph node id"] = None
    got, _ = file_case(ref, tmp_path, events, {})
    assert got[3]["tid"] == 8 and got[4]["tid"] == 8


def test_flow_follows_a_null_id_kernel_whose_ts_is_fixed(ref, tmp_path):
    events = [
        TN(7),
        K(7, 0, node=1, dur=10),
        K(143, 0, node=2, dur=10, stream=143),
        K(143, 9.5, node=None),
        F(143, 9.5),
    ]
    events[3]["args"]["graph node id"] = None
    file_case(ref, tmp_path, events, {2: [{"stream": 143}]})


def test_flows_at_one_place_with_several_kernels(ref, tmp_path):
    events = [TN(7), K(7, 10, node=5), K(7, 10, node=6), F(7, 10), F(7, 10, ident=2)]
    file_case(ref, tmp_path, events, {5: [{"stream": 60}], 6: [{"stream": 61}]})


def test_flow_numbers_written_differently(ref, tmp_path):
    events = [
        TN(7),
        '{"ph":"X","cat":"kernel","pid":0,"tid":7,"ts":1e1,"dur":1,"args":{"graph node id":5}}',
        '{"ph":"f","cat":"ac2g","pid":0,"tid":7,"ts":10,"id":1}',
        '{"ph":"f","cat":"ac2g","pid":0,"tid":7.0,"ts":10.000,"id":2}',
        '{"ph":"f","cat":"ac2g","pid":0.0,"tid":7,"ts":1.0E+1,"id":3}',
    ]
    file_case(ref, tmp_path, events, {5: [{"stream": 60}]})


@pytest.mark.parametrize("stream", [61, "61", " 61 ", "+61", "6_1", 61.9, True, -4])
def test_stream_values_in_annotation_files(ref, tmp_path, stream):
    for kind in ("json", "pkl"):
        d = tmp_path / kind
        d.mkdir()
        got, _ = file_case(
            ref, d, [K(7, 10, node=5), F(7, 10)], {5: [{"name": "x", "stream": stream}]}, ann_kind=kind
        )
        assert got[0]["tid"] == int(stream)


@pytest.mark.parametrize("stream", ["\u0663", "\uff16\uff11", "61\u2028", "\u200361"])
def test_stream_values_python_int_accepts(ref, tmp_path, stream):
    # int() takes any Unicode decimal digits and strips any Unicode whitespace
    got, _ = file_case(ref, tmp_path, [K(7, 10, node=5), F(7, 10)], {5: [{"stream": stream}]})
    assert got[0]["tid"] == int(stream)


def test_unused_annotation_with_a_bad_stream(ref, tmp_path):
    # the reference only int()s the streams of nodes that events use
    file_case(ref, tmp_path, [K(7, 10, node=5), F(7, 10)], {5: [{"stream": 60}], 6: [{"stream": "side"}]})


@pytest.mark.parametrize("node", [2**63 - 1, 2**63, 2**63 + 5, 2**64 - 1])
def test_64_bit_node_ids_in_files(ref, tmp_path, node):
    _got, report = file_case(
        ref, tmp_path, [TN(7), K(7, 10, node=node), F(7, 10)], {node: [{"name": "big", "stream": 60}]}
    )
    assert report["annotated"] == 1


@pytest.mark.parametrize(
    "value",
    [
        10**40,
        -(10**30),
        [1e16, 1e-5, -0.0, 1.5e300, 5e-324, 0.1],
        {"nested": [None, True, False, "it's", 'say "hi"', "back\\slash", "tab\t", "nl\n"]},
        [
            "µs",
            "ünï",
            "中文",
            "\U0001f600",
            "\x00\x7f",
            "\u0600",
            "\u0378",
            "\u00ad",
            "\u2028",
            "\U000e0001",
            "\u0301",
            "\ufeff",
        ],
        "plain string with ünïcode \u0600",
        [],
        {},
    ],
)
def test_str_of_annotation_values_in_files(ref, tmp_path, value):
    for kind in ("json", "pkl"):
        d = tmp_path / kind
        d.mkdir()
        file_case(ref, d, [K(7, 10, node=5)], {5: [{"v": value}, value]}, ann_kind=kind)


def test_pickle_specific_values(ref, tmp_path):
    # tuples, non-string dict keys (json.dump writes 3 -> "3", True -> "true", None ->
    # "null", 1.5 -> "1.5"), non-dict items, every pickle protocol
    ann = {
        5: [
            {
                "t": (1, "a"),
                "one": (1,),
                3: "int key",
                True: "bool key",
                None: "none key",
                1.5: "float key",
                "n": [(), {"k": (None, 1.0)}],
            },
            ("tuple item",),
            7,
            2.5,
            10**20,
        ],
        6: ({"stream": 60},),
    }
    for protocol in range(6):
        d = tmp_path / f"p{protocol}"
        d.mkdir()
        trace = [K(7, 10, node=5), K(7, 20, node=6), F(7, 20)]
        body = ",".join(json.dumps(e) for e in trace)
        text = '{"traceEvents": [' + body + "]}"
        (d / "t.json").write_text(text)
        pkl = write_pickle_annotations(d / "a.pkl", ann, protocol=protocol)
        exp = expected_pipeline(ref, text, ann)
        cgfast.annotate_file(d / "t.json", pkl, d / "o.json")
        check_output(exp, text, (d / "o.json").read_text())


def test_defaultdict_and_bare_json_annotations(ref, tmp_path):
    ann = {5: [{"name": "x", "stream": 60}], 6: ["s"]}
    events = [K(7, 10, node=5), K(7, 20, node=6), F(7, 10)]
    for i, writer in enumerate(
        (
            lambda p: write_pickle_annotations(p.with_suffix(".pkl"), ann, default_dict=True),
            lambda p: write_json_annotations(p.with_suffix(".json"), ann, wrapped=False),
            lambda p: write_json_annotations(p.with_suffix(".json.gz"), ann, gz=True),
            lambda p: write_json_annotations(p.with_suffix(".data"), ann, wrapped=False, gz=True),
        )
    ):
        d = tmp_path / str(i)
        d.mkdir()
        path = writer(d / "a")
        text = '{"traceEvents": [' + ",".join(json.dumps(e) for e in events) + "]}"
        (d / "t.json").write_text(text)
        report = cgfast.annotate_file(d / "t.json", path, d / "o.json")
        check_output(expected_pipeline(ref, text, ann), text, (d / "o.json").read_text())
        assert report["annotations_loaded"] == 2


def test_load_and_save_annotations_round_trip(tmp_path):
    ann = {5: [{"name": "x", "stream": 60}, "label"], 8589934592: [{"layer": 3, "w": [1, 2.5, None]}]}
    for name in ("a.json", "a.json.gz"):
        cgfast.save_annotations(tmp_path / name, ann)
        assert cgfast.load_annotations(tmp_path / name) == ann
    with open(tmp_path / "a.pkl", "wb") as f:
        pickle.dump(collections.defaultdict(list, ann), f)
    assert cgfast.load_annotations(tmp_path / "a.pkl") == ann


def test_duplicate_keys_in_events(ref, tmp_path):
    events = [
        TN(7),
        '{"ph":"X","cat":"kernel","pid":0,"tid":9,"tid":7,"ts":10,"dur":1,"args":{"graph node id":5}}',
        '{"ph":"X","cat":"kernel","pid":0,"tid":7,"ts":20,"dur":1,"args":{"graph node id":1,"graph node id":6,"stream":3,"stream":7}}',
        '{"ph":"f","cat":"ac2g","pid":0,"tid":7,"ts":10,"id":1}',
    ]
    file_case(ref, tmp_path, events, {5: [{"stream": 60}], 6: [{"stream": 61}]})


def test_trace_events_key_inside_other_values(ref, tmp_path):
    top_before = '"deviceProperties": [{"traceEvents": [{"ph": "X", "cat": "kernel", "tid": 7, "ts": 1, "args": {"graph node id": 5}}]}], "s": "\\"traceEvents\\": [", '
    _got, report = file_case(
        ref,
        tmp_path,
        [TN(7), K(7, 10, node=5), F(7, 10)],
        {5: [{"stream": 60}]},
        top_before=top_before,
        top_after=', "traceName": "x"',
    )
    assert report["annotated"] == 1


def test_empty_trace_events(ref, tmp_path):
    file_case(ref, tmp_path, [], {5: [{"stream": 60}]})
    (tmp_path / "e").mkdir()
    file_case(ref, tmp_path / "e", [], {}, top_before='"schemaVersion": 1, ', top_after=', "traceName": "x"')


def test_float_tid_work_lane_without_a_name(ref, tmp_path):
    # an eager kernel on lane 7.0: the reference names it {"tid": 7.0, "args": {"name": "stream 7.0"}}
    file_case(ref, tmp_path, [K(7.0, 10), F(7, 10)], {})


def test_whitespace_and_escapes_everywhere(ref, tmp_path):
    events = [
        '\r\n\t {\t"ph" :"M" , "name":"thread_name","pid":0,"tid":7,"args":{"name":"stream 7"}}',
        '{ "ph" : "X" ,\n "cat" : "kernel" , "name" : "\\u006b\\/\\"q\\" \\ud83d\\ude00 é" ,\n "pid" : 0 , "tid" : 7 ,"ts":0 ,"dur" : 10 , "args" : { "graph node id" : 1 } }',
        '{"ph":"X","cat":"kernel","name":"µ","pid":0,"tid":7,"ts":9.5,"dur":1,"args":{"graph\\u0020node id":2}}',
        '{"ph":"X","cat":"kernel","name":"x","pid":0,"tid":7,"ts":9.75,"dur":1,"args":{"graph node id":3,"x":[1,{"y":"\\n"}]}}',
        '{"ph":"f","cat":"ac2g","pid":0,"tid":7,"ts":9.5,"id":1}',
        '{"ph":"X","cat":"gpu_user_annotation","name":"## x ##","pid":0,"tid":20,"ts":0,"dur":5}',
    ]
    file_case(ref, tmp_path, events, {1: [{"name": 'ä"b'}], 2: ["l"]})


# =========================================================================== hypothesis: traces as files

GPU_TIDS = [7, 8, 20, 60, 61, 143]
NODES = [1, 2, 3, 4, 5, 6, 8589934592, 8589934593]
SAFE_TEXT = st.text(
    alphabet=st.sampled_from(
        [*list("abcxyz _.:<>()[]{},'\"\\/"), "\n", "\t", "µ", "é", "ü", "中", "😀", "é", "\x01"]
    ),
    max_size=10,
)
NAMES = st.one_of(
    SAFE_TEXT,
    st.sampled_from(
        [
            "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float>>(int)"
            * 2,
            "Memcpy DtoD (Device -> Device)",
            "triton_poi_fused_0",
        ]
    ),
)


@st.composite
def times(draw):
    base = draw(st.sampled_from([0, 0, 5361804756000]))
    off = draw(st.one_of(st.integers(0, 120), st.integers(0, 120_000).map(lambda n: n / 1000)))
    v = base + off
    return v


durs = st.one_of(st.integers(0, 30), st.integers(0, 30_000).map(lambda n: n / 1000), st.none())


def json_values(text=SAFE_TEXT):
    leaves = st.one_of(
        st.integers(-(2**100), 2**100),
        st.floats(allow_nan=False, allow_infinity=False),
        text,
        st.booleans(),
        st.none(),
    )
    return st.recursive(
        leaves,
        lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(text, kids, max_size=3)),
        max_leaves=6,
    )


streams = st.one_of(
    st.sampled_from(GPU_TIDS),
    st.integers(-2, 300),
    st.sampled_from(GPU_TIDS).map(str),
    st.sampled_from([60.9, " 61", "+60", True, "6_1"]),
)


def annotation_items():
    dict_item = st.dictionaries(
        st.sampled_from(["name", "module", "layer", "annotation", "x", "ünï"]), json_values(), max_size=4
    ).flatmap(lambda d: st.one_of(st.just(d), streams.map(lambda s: {**d, "stream": s})))
    return st.lists(
        st.one_of(dict_item, SAFE_TEXT, st.integers(0, 9), st.floats(allow_nan=False, allow_infinity=False)),
        max_size=4,
    )


annotations_st = st.dictionaries(st.sampled_from([*NODES, 0, 99]), annotation_items(), max_size=8)


@st.composite
def file_traces(draw):
    events = []
    for _ in range(draw(st.integers(0, 30))):
        kind = draw(
            st.sampled_from(
                ["graphed"] * 5 + ["eager", "flow_at", "flow_at", "flow", "start", "noise", "meta", "cpu"]
            )
        )
        if kind in ("graphed", "eager"):
            args = {}
            if draw(st.booleans()):
                args["stream"] = draw(st.sampled_from(GPU_TIDS))
            if draw(st.booleans()):
                args["correlation"] = draw(st.integers(0, 9))
            if kind == "graphed":
                args["graph node id"] = draw(st.sampled_from([*NODES, 99, 8589934592]))
            elif draw(st.booleans()):
                args["graph node id"] = 0
            e = {
                "ph": "X",
                "cat": draw(st.sampled_from(["kernel"] * 4 + ["gpu_memcpy", "gpu_memset"])),
                "pid": 0,
                "tid": draw(st.sampled_from(GPU_TIDS)),
                "ts": draw(times()),
            }
            d = draw(durs)
            if d is not None:
                e["dur"] = d
            if draw(st.integers(0, 4)):
                e["name"] = draw(NAMES)
            e["args"] = args
            events.append(e)
        elif kind == "flow_at" and events:
            target = draw(st.sampled_from(events))
            if target.get("cat") in WORK:
                tid = target["tid"]
                if draw(st.integers(0, 4)) == 0:
                    tid = float(tid)  # 7.0 == 7
                events.append(
                    {
                        "ph": "f",
                        "id": draw(st.integers(1, 9)),
                        "pid": 0,
                        "tid": tid,
                        "ts": target["ts"],
                        "cat": "ac2g",
                        "name": "ac2g",
                        "bp": "e",
                    }
                )
        elif kind == "flow":
            events.append(
                {
                    "ph": "f",
                    "id": 1,
                    "pid": 0,
                    "tid": draw(st.sampled_from([*GPU_TIDS, 24])),
                    "ts": draw(times()),
                    "cat": "ac2g",
                    "name": "ac2g",
                    "bp": "e",
                }
            )
        elif kind == "start":
            events.append(
                {
                    "ph": "s",
                    "id": 1,
                    "pid": 487,
                    "tid": 1399,
                    "ts": draw(times()),
                    "cat": "ac2g",
                    "name": "ac2g",
                }
            )
        elif kind == "noise":
            events.append(
                {
                    "ph": "X",
                    "cat": "gpu_user_annotation",
                    "name": "## Call CompiledFxGraph ##",
                    "pid": 0,
                    "tid": draw(st.sampled_from([*GPU_TIDS, 24, 20.0])),
                    "ts": draw(times()),
                    "dur": 5,
                    "args": {"External id": 1},
                }
            )
        elif kind == "meta":
            tid = draw(st.sampled_from([*GPU_TIDS, 24, 1399, 0, 7.0]))
            name = draw(st.sampled_from(["thread_name", "thread_name", "thread_sort_index", "process_name"]))
            label = draw(st.sampled_from([f"stream {tid} ", "python3", f"thread {tid}"]))
            e = {
                "name": name,
                "ph": "M",
                "ts": 0,
                "pid": draw(st.sampled_from([0, 0, 487, 2])),
                "tid": tid,
                "args": {"name": label} if name != "thread_sort_index" else {"sort_index": 3},
            }
            events.append(e)
        else:
            events.append(
                {
                    "ph": "X",
                    "cat": draw(st.sampled_from(["cpu_op", "cuda_runtime"])),
                    "name": draw(NAMES),
                    "pid": 487,
                    "tid": 1399,
                    "ts": draw(times()),
                    "dur": 1,
                    "args": {"correlation": 1},
                }
            )
    return events


# ---- random but valid JSON text for the same values

WS = ["", " ", "  ", "\n", "\t", "\r\n", " \n\t "]
SHORT = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r", "\b": "\\b", "\f": "\\f"}


def enc_str(s: str, rng: random.Random, p_escape: float) -> str:
    out = ['"']
    for ch in s:
        c = ord(ch)
        if ch in SHORT or c < 0x20:
            if rng.random() < 0.5 and ch in SHORT:
                out.append(SHORT[ch])
            else:
                out.append(f"\\u{c:04x}" if rng.random() < 0.5 else f"\\u{c:04X}")
        elif rng.random() < p_escape:
            if ch == "/":
                out.append("\\/")
            elif c > 0xFFFF:
                v = c - 0x10000
                out.append(f"\\u{0xD800 + (v >> 10):04x}\\u{0xDC00 + (v & 0x3FF):04x}")
            else:
                out.append(f"\\u{c:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def enc_num(v, rng: random.Random) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    r = repr(v)
    forms = [r, f"{v:.17e}", f"{v:.17E}", f"{v:.16e}"]
    if "e" not in r and "." in r:
        forms.append(r + "0")
    return rng.choice(forms)


def enc(v, rng: random.Random, style: dict) -> str:
    w = lambda: rng.choice(style["ws"])  # noqa: E731
    if isinstance(v, dict):
        items = list(v.items())
        if style["shuffle"]:
            rng.shuffle(items)
        if not items:
            return "{" + w() + "}"
        return (
            "{"
            + ",".join(
                w() + enc_str(k, rng, style["esc"]) + w() + ":" + w() + enc(x, rng, style) + w()
                for k, x in items
            )
            + "}"
        )
    if isinstance(v, list):
        if not v:
            return "[" + w() + "]"
        return "[" + ",".join(w() + enc(x, rng, style) + w() for x in v) + "]"
    if isinstance(v, str):
        return enc_str(v, rng, style["esc"])
    if v is None:
        return "null"
    return enc_num(v, rng)


@st.composite
def styles(draw):
    ws = draw(st.sampled_from([[""], [" "], WS, ["", "\n"]]))
    return {
        "ws": ws,
        "shuffle": draw(st.booleans()),
        "esc": draw(st.sampled_from([0.0, 0.0, 0.2, 1.0])),
        "seed": draw(st.integers(0, 2**32)),
    }


def render(events, style, top_before, top_after) -> str:
    rng = random.Random(style["seed"])
    w = lambda: rng.choice(style["ws"])  # noqa: E731
    parts = [enc(e, rng, style) if not isinstance(e, str) else e for e in events]
    arr = "[" + ",".join(w() + p + w() for p in parts) + "]" if parts else "[" + w() + "]"
    fields = [enc_str(k, rng, style["esc"]) + w() + ":" + w() + enc(v, rng, style) for k, v in top_before]
    fields.append(enc_str("traceEvents", rng, 0.0) + w() + ":" + w() + arr)
    fields += [enc_str(k, rng, style["esc"]) + w() + ":" + w() + enc(v, rng, style) for k, v in top_after]
    return w() + "{" + w() + ("," + w()).join(fields) + w() + "}" + rng.choice(["", "\n", "  \n"])


TOP = st.lists(
    st.sampled_from(
        [
            ("schemaVersion", 1),
            ("deviceProperties", [{"id": 0, "name": "NVIDIA H200", "traceEvents": [1]}]),
            ("displayTimeUnit", "ms"),
            ("traceName", "t.pt.trace.json"),
            ("ünï", "中"),
            ("baseTimeNanoseconds", 1790857026000000000),
        ]
    ),
    max_size=3,
    unique_by=lambda kv: kv[0],
)


def write_annotation_file(directory: Path, ann: dict, kind: str) -> Path:
    if kind == "pkl":
        with open(directory / "a.pkl", "wb") as f:
            pickle.dump(ann, f)
        return directory / "a.pkl"
    if kind == "defaultdict":
        with open(directory / "a.pkl", "wb") as f:
            pickle.dump(collections.defaultdict(list, ann), f, protocol=2)
        return directory / "a.pkl"
    body = {str(k): v for k, v in ann.items()}
    if kind in ("json", "json.gz"):
        body = {"format": "cgfast-annotations", "version": 1, "annotations": body}
    data = json.dumps(body, ensure_ascii=False).encode()
    path = directory / ("a.json.gz" if kind.endswith("gz") else "a.json")
    path.write_bytes(gzip.compress(data) if kind.endswith("gz") else data)
    return path


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    events=file_traces(),
    ann=annotations_st,
    style=styles(),
    top_before=TOP,
    top_after=TOP,
    ann_kind=st.sampled_from(["json", "bare", "json.gz", "pkl", "defaultdict"]),
    gz=st.sampled_from([(False, False), (True, False), (False, True)]),
    opts=st.sampled_from([{}, {}, {"default_stream": 20}, {"overlap_stream": 61}, {"max_adjust_us": 0.25}]),
)
def test_hypothesis_files(ref, events, ann, style, top_before, top_after, ann_kind, gz, opts):
    top_after = [kv for kv in top_after if kv[0] not in {k for k, _ in top_before}]
    text = render(events, style, top_before, top_after)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        trace = d / ("t.json.gz" if gz[0] else "t.json")
        data = text.encode("utf-8")
        trace.write_bytes(gzip.compress(data, compresslevel=1) if gz[0] else data)
        ann_path = write_annotation_file(d, ann, ann_kind)
        ref_ann = annotations_for_reference(ann_path)
        exp = expected_pipeline(ref, text, ref_ann, **opts)
        out = d / ("o.json.gz" if gz[1] else "o.json")
        report = cgfast.annotate_file(trace, ann_path, out, **opts)
        check_output(exp, text, read_text(out))
        check_report(report, exp, trace=trace, output=out, annotations=ann_path)
        assert sorted(os.listdir(d)) == sorted([trace.name, ann_path.name, out.name])


# =========================================================================== the checks can fail


def test_check_output_catches_changes(ref, gen_traces, tmp_path):
    """The comparison used throughout this file is not a tautology."""
    d, trace, ann = gen_traces[0]
    out = tmp_path / "o.json"
    assert run_cli(trace, "-a", d / "kernel_annotations_rank0_1.json", "-o", out).returncode == 0
    text, good = trace.read_text(), out.read_text()
    exp = expected_pipeline(ref, text, ann)
    check_output(exp, text, good)
    raw = split_events(good).events
    untouched = next(
        pos
        for pos, i in enumerate(exp.origin)
        if i in exp.untouched and raw[pos].startswith('{"ph": "X", "cat": "cpu_op"')
    )
    flow = next(
        pos
        for pos, e in enumerate(exp.events)
        if e.get("ph") == "f" and pos in exp.flexible and e["tid"] == 8
    )
    kernel = next(
        pos for pos, e in enumerate(exp.events) if e.get("cat") == "kernel" and "name" in e.get("args", {})
    )

    def tampered(pos, new):
        return good.replace(raw[pos], new, 1)

    bad_outputs = {
        "whitespace in an untouched event": tampered(untouched, raw[untouched].replace(", ", ",", 1)),
        "an untouched event re-serialised": tampered(
            untouched, json.dumps(json.loads(raw[untouched]), separators=(",", ":"))
        ),
        "a flow left on its old lane": tampered(flow, raw[flow].replace('"tid": 8', '"tid": 7')),
        "an annotation missing": tampered(
            kernel,
            json.dumps(
                {
                    **exp.events[kernel],
                    "args": {k: v for k, v in exp.events[kernel]["args"].items() if k != "name"},
                }
            ),
        ),
        "an int written as a float": tampered(kernel, raw[kernel].replace('"pid": 0', '"pid": 0.0', 1)),
        "the reference's own output": json.dumps(
            {**dict(json.loads(good).items()), "traceEvents": exp.ref_events}
        ),
        "an event dropped": re.sub(re.escape(raw[untouched]) + r"\s*,\s*", "", good, count=1),
    }
    for what, bad in bad_outputs.items():
        assert bad != good, what
        with pytest.raises(AssertionError):
            check_output(exp, text, bad)
            print(what)  # only reached if the check missed it


# =========================================================================== integers beyond 2**53

EPOCH_NS = 1_733_212_345_678_901_234  # epoch nanoseconds: more than a float holds exactly


def test_epoch_nanosecond_times_are_annotated_and_moved(ref, tmp_path):
    events = [
        TN(7),
        K(7, EPOCH_NS, node=1, dur=3),
        F(7, EPOCH_NS),
        K(7, EPOCH_NS + 2, node=2, dur=2),  # overlaps by one ns: to lane 8
        F(7, EPOCH_NS + 2),
        K(7, EPOCH_NS + 3, node=3, dur=2),  # starts where node 1 ends
        K(143, EPOCH_NS, node=4, dur=5),
        K(143, EPOCH_NS + 4, node=5, dur=1),  # one ns of jitter: ts fixed to EPOCH_NS + 5
        F(143, EPOCH_NS + 4),
        K(143, 1.7332123456789012e18, node=6),  # a float near them compares exactly
    ]
    annotations = {
        1: [{"name": "a"}],
        2: ["b"],
        4: [{"stream": 143}],
        5: [{"stream": 143}],
        6: [{"stream": 143}],
    }
    got, report = file_case(ref, tmp_path, events, annotations)
    assert report["annotated"] == 5
    assert [(e["tid"], e["ts"]) for e in got if e.get("cat") == "kernel"][:5] == [
        (7, EPOCH_NS),
        (8, EPOCH_NS + 2),
        (7, EPOCH_NS + 3),
        (143, EPOCH_NS),
        (143, EPOCH_NS + 5),
    ]
    assert got[1]["args"]["name"] == "a" and got[3]["args"]["annotation"] == "b"
