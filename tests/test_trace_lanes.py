"""``--lanes all|none`` as torch 2.15's ``export_chrome_trace(graph_lanes=...)`` reads
(``torch/profiler/_chrome_trace_export.py``): ``all`` moves graphed events to the lane
their annotation names (or the default stream) and keeps the lane each ran on as
``args["original_stream"]``; ``none`` moves nothing for annotations and writes a lane an
annotation names as ``args["annotated_stream"]``. Checked on a real H200 trace whose
annotations put attention on stream 61."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import cgfast
from helpers import load_json, run_cli

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "h200-eager-two-stream"
TRACE = EXAMPLE / "000000.h200.pt.trace.json.gz"
ANNOTATIONS = EXAMPLE / "kernel_annotations_rank0_422.json"


def streams_asked() -> dict:
    """node id -> the stream its annotation names."""
    items = json.loads(ANNOTATIONS.read_text())["annotations"]
    return {int(n): int(i["stream"]) for n, its in items.items() for i in its if "stream" in i}


def gpu_work(events: list) -> dict:
    """(correlation, name, ts) -> event, for the GPU work of a trace (this one's ids are
    recovered, so the input has none)."""
    return {
        (e["args"]["correlation"], e["name"], e["ts"]): e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
    }


def annotate(tmp_path, lanes, *flags):
    out = tmp_path / f"{lanes}.json"
    proc = run_cli(TRACE, "-a", ANNOTATIONS, "-o", out, "--spans", "none", "--lanes", lanes, *flags)
    assert proc.returncode == 0, proc.stderr
    return out


def test_lanes_all_keeps_the_lane_each_moved_event_ran_on(tmp_path):
    before = gpu_work(load_json(TRACE)["traceEvents"])
    after = gpu_work(load_json(annotate(tmp_path, "all"))["traceEvents"])
    assert before.keys() == after.keys(), "no start in this trace is repaired"
    moved = [k for k in before if after[k]["tid"] != before[k]["tid"]]
    assert len(moved) > 20, "attention moves to stream 61"
    for k, e in after.items():
        if k in moved:
            assert e["args"]["original_stream"] == before[k]["tid"] and e["args"]["stream"] == e["tid"]
        else:
            assert "original_stream" not in e["args"], e
        assert "annotated_stream" not in e["args"]


def test_lanes_none_moves_nothing_and_names_the_asked_stream(tmp_path):
    asked = streams_asked()
    inp = load_json(TRACE)
    before = gpu_work(inp["traceEvents"])
    out = annotate(tmp_path, "none")
    after = gpu_work(load_json(out)["traceEvents"])
    assert before.keys() == after.keys()
    after = {k: e for k, e in after.items() if "graph node id" in e["args"]}
    named = 0
    for k, e in after.items():
        assert "original_stream" not in e["args"]
        assert e["args"].get("name"), "still annotated"
        node = e["args"]["graph node id"]
        if node in asked:
            named += 1
            assert e["args"]["annotated_stream"] == asked[node] and isinstance(
                e["args"]["annotated_stream"], int
            )
        else:
            assert "annotated_stream" not in e["args"]
        if e["tid"] != before[k]["tid"]:
            # only the overlap lane takes events off a lane, as with --lanes all
            assert e["tid"] == 8 and before[k]["tid"] == 7, e
        assert e["args"].get("stream") == e["tid"]
    assert named > 20
    report = json.loads(
        run_cli(
            TRACE,
            "-a",
            ANNOTATIONS,
            "-o",
            tmp_path / "again.json",
            "--spans",
            "none",
            "--lanes",
            "none",
            "--json",
        ).stdout
    )
    assert report["annotated"] == len(after)
    # the same from Python, byte for byte
    cgfast.annotate_file(
        TRACE, annotations=ANNOTATIONS, output=tmp_path / "py.json", spans=None, lanes="none"
    )
    assert (tmp_path / "py.json").read_bytes() == out.read_bytes()


def test_lanes_all_is_the_default_and_bad_values_are_refused(tmp_path):
    default = tmp_path / "default.json"
    assert run_cli(TRACE, "-a", ANNOTATIONS, "-o", default, "--spans", "none").returncode == 0
    assert default.read_bytes() == annotate(tmp_path, "all").read_bytes()
    cgfast.annotate_file(TRACE, annotations=ANNOTATIONS, output=tmp_path / "py.json", spans=None)
    assert (tmp_path / "py.json").read_bytes() == default.read_bytes()
    proc = run_cli(TRACE, "-a", ANNOTATIONS, "-o", tmp_path / "bad.json", "--lanes", "some")
    assert proc.returncode != 0 and not (tmp_path / "bad.json").exists()
    with pytest.raises(ValueError, match="lanes"):
        cgfast.annotate_file(TRACE, annotations=ANNOTATIONS, output=tmp_path / "bad.json", lanes="some")
    assert not (tmp_path / "bad.json").exists()


def test_trace_handler_passes_lanes_on():
    from cgfast.profiler import trace_handler

    assert trace_handler("d", lanes="none").lanes == "none"
    assert trace_handler("d").lanes == "all"


def test_lanes_reference_is_all_without_original_stream(tmp_path):
    # the drop-in output: the reference's lanes and nothing the reference does not write
    everything = load_json(annotate(tmp_path, "all"))
    reference = load_json(annotate(tmp_path, "reference"))
    carried = 0
    for e in everything["traceEvents"]:
        if "original_stream" in e.get("args", {}):
            del e["args"]["original_stream"]
            carried += 1
    assert carried > 20
    assert not any("original_stream" in e.get("args", {}) for e in reference["traceEvents"])
    assert reference == everything
    out = tmp_path / "py.json"
    cgfast.annotate_file(TRACE, annotations=ANNOTATIONS, output=out, spans=None, lanes="reference")
    assert out.read_bytes() == (tmp_path / "reference.json").read_bytes()
