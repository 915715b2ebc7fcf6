"""Scope spans (``cgfast annotate --spans KEY``, on by default for ``module``): per lane,
each run of a replay's consecutive graphed events sharing a dotted prefix of the key's
value becomes one ``gpu_user_annotation`` event, so viewers show graph replays with the
nested module ranges eager traces have."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest

import cgfast
from helpers import (
    assert_clean_failure,
    check_spans,
    is_scope_span,
    load_json,
    read_text,
    run_cli,
    split_events,
    split_spans,
    write_json_annotations,
)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*/000000.h200.pt.trace.json.gz"))


def annotate(trace: Path, out: Path, *args) -> dict:
    proc = run_cli("annotate", trace, "-o", out, "--json", "--no-progress", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("trace", EXAMPLES, ids=[t.parent.name for t in EXAMPLES])
def test_real_traces_get_nested_module_spans(trace, tmp_path):
    report = annotate(trace, tmp_path / "out.json")
    events, spans = split_spans(load_json(tmp_path / "out.json")["traceEvents"])
    check_spans(events, spans)
    assert report["spans"] == len(spans)
    modules = {
        e["args"]["module"] for e in events if isinstance(e.get("args"), dict) and "module" in e["args"]
    }
    if not modules:
        # the eager example names its scopes only: spans of "name" then
        assert spans == []
        annotate(trace, tmp_path / "out.json", "--spans", "name")
        events, spans = split_spans(load_json(tmp_path / "out.json")["traceEvents"])
        check_spans(events, spans, key="name")
        assert {s["name"] for s in spans} == {
            e["args"]["name"]
            for e in events
            if isinstance(e.get("args"), dict) and "name" in e["args"] and e["args"].get("graph node id")
        }
        return
    names = {s["name"] for s in spans}
    # every module and each of its dotted prefixes has a span
    assert {m[:i] for m in modules for i in range(1, len(m) + 1) if i == len(m) or m[i] == "."} == names
    assert any("." in n for n in names), "nested scopes"
    gpu_pids = {e["pid"] for e in events if e.get("cat") == "kernel"}
    assert {s["pid"] for s in spans} <= gpu_pids


@pytest.mark.parametrize("trace", EXAMPLES[:1], ids=[t.parent.name for t in EXAMPLES[:1]])
def test_spans_none_writes_the_output_without_spans(trace, tmp_path):
    with_spans = annotate(trace, tmp_path / "with.json")
    without = annotate(trace, tmp_path / "without.json", "--spans", "none")
    assert "spans" in with_spans and "spans" not in without
    raw_with = split_events(read_text(tmp_path / "with.json"))
    raw_without = split_events(read_text(tmp_path / "without.json"))
    assert raw_with.events[: len(raw_without.events)] == raw_without.events
    assert all(is_scope_span(json.loads(e)) for e in raw_with.events[len(raw_without.events) :])
    assert not any(is_scope_span(json.loads(e)) for e in raw_without.events)


def kernel(ts, dur, node, tid=7, correlation=1, cat="kernel"):
    return {
        "ph": "X",
        "cat": cat,
        "name": f"k{node}",
        "pid": 0,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"correlation": correlation, "graph node id": node},
    }


def spans_of(tmp_path, events, annotations, *args, **kwargs) -> list:
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    ann = write_json_annotations(tmp_path / "a.json", annotations)
    out = tmp_path / "o.json"
    if kwargs.get("python"):
        report = cgfast.annotate_file(trace, annotations=ann, output=out, **kwargs["python"])
    else:
        report = annotate(trace, out, "-a", ann, *args)
    written, spans = split_spans(load_json(out)["traceEvents"])
    return written, spans, report


def test_runs_of_another_key_nest_break_and_cluster(tmp_path):
    scope = {1: "a.b", 2: "a.b", 3: "a.c", 4: "a.c.x", 5: None, 6: "a.b", 7: "a.b.y", 8: "a.d", 9: "a.b"}
    # all on lane 60, which the overlap pass leaves alone
    annotations = {n: [{"scope": v, "stream": 60} if v else {"stream": 60}] for n, v in scope.items()}
    events = [
        kernel(0, 10, 1),
        kernel(10, 5, 2),
        kernel(20, 5, 3),
        kernel(25, 5, 4),
        kernel(40, 5, 5),  # unannotated: every run ends
        kernel(50, 10, 6),
        kernel(55, 10, 7),  # overlap by 5 us: one cluster of prefix a.b
        kernel(70, 5, 8, correlation=2),  # the next replay: runs end
        kernel(80, 5, 9, correlation=2),
    ]
    written, spans, report = spans_of(
        tmp_path, events, annotations, "--spans", "scope", "--max-adjust-us", "0"
    )
    got = [(s["name"], s["ts"], s["dur"]) for s in spans]
    assert got == [
        ("a", 0, 30),
        ("a.b", 0, 15),
        ("a.c", 20, 10),
        ("a.c.x", 25, 5),
        ("a", 50, 15),
        ("a.b", 50, 15),
        ("a", 70, 15),
        ("a.d", 70, 5),
        ("a.b", 80, 5),
    ]
    assert report["spans"] == len(spans)
    assert all(
        s["tid"] == 60 and s["pid"] == 0 and s["args"] == {"cgfast": "scope", "key": "scope"} for s in spans
    )
    check_spans(written, spans, key="scope")
    # no annotation has a module: no spans by default
    assert spans_of(tmp_path, events, annotations)[1] == []


def test_spans_follow_moved_and_repaired_events(tmp_path):
    # kernel 2 overlaps kernel 1 on the default lane and moves to lane 8; memcpy 3 starts
    # 0.5 us early and is repaired: spans use the final lanes and starts
    annotations = {
        1: [{"module": "m.a"}],
        2: [{"module": "m.b"}],
        3: [{"module": "m.a"}],
        4: [{"module": "m.c", "stream": 60}],
    }
    events = [
        kernel(0.0, 10.0, 1),
        kernel(5.0, 2.0, 2),
        kernel(9.5, 1.25, 3, cat="gpu_memcpy"),
        kernel(3.0, 1.0, 4),
    ]
    written, spans, _ = spans_of(tmp_path, events, annotations)
    by_lane = {}
    for s in spans:
        by_lane.setdefault(s["tid"], []).append((s["name"], s["ts"], s["dur"]))
    assert by_lane == {
        7: [("m", 0.0, 11.25), ("m.a", 0.0, 11.25)],
        8: [("m", 5.0, 2.0), ("m.b", 5.0, 2.0)],
        60: [("m", 3.0, 1.0), ("m.c", 3.0, 1.0)],
    }
    check_spans(written, spans)


def test_annotate_file_takes_spans(tmp_path):
    annotations = {1: [{"module": "m.a"}], 2: [{"component": "x.y"}]}
    events = [kernel(0, 1, 1), kernel(2, 1, 2)]
    _, spans, report = spans_of(tmp_path, events, annotations, python={})
    assert [s["name"] for s in spans] == ["m", "m.a"] and report["spans"] == 2
    _, spans, report = spans_of(tmp_path, events, annotations, python={"spans": "component"})
    assert [s["name"] for s in spans] == ["x", "x.y"]
    _, spans, report = spans_of(tmp_path, events, annotations, python={"spans": None})
    assert spans == [] and "spans" not in report


def test_many_traces_get_spans(tmp_path):
    for i, trace in enumerate(EXAMPLES):
        d = tmp_path / f"run{i}"
        d.mkdir()
        (d / trace.name).write_bytes(trace.read_bytes())
        for a in trace.parent.glob("kernel_annotations_*.json"):
            (d / a.name).write_bytes(a.read_bytes())
    proc = run_cli("annotate", tmp_path, "--no-progress")
    assert proc.returncode == 0, proc.stderr
    outputs = sorted(tmp_path.glob("run*/*.annotated.json.gz"))
    assert len(outputs) == len(EXAMPLES)
    with_spans = 0
    for out in outputs:
        events, spans = split_spans(load_json(out)["traceEvents"])
        check_spans(events, spans)
        with_spans += bool(spans)
    assert with_spans == 2, "the compiled examples' modules have spans"


def test_an_empty_key_is_refused(tmp_path):
    trace = EXAMPLES[0]
    proc = run_cli("annotate", trace, "-o", tmp_path / "o.json", "--spans", "")
    assert_clean_failure(proc, "--spans")
    assert not (tmp_path / "o.json").exists()
    with pytest.raises(ValueError):
        cgfast.annotate_file(trace, output=tmp_path / "o.json", spans="")


@pytest.mark.parametrize("trace", EXAMPLES, ids=[t.parent.name for t in EXAMPLES])
def test_annotating_an_output_again_changes_nothing(trace, tmp_path):
    annotations = next(trace.parent.glob("kernel_annotations_*.json"))
    first = tmp_path / "first.json"
    annotate(trace, first, "-a", annotations)
    # cgfast's own spans make way for the new run's: not doubled, the same bytes
    again = annotate(first, tmp_path / "again.json", "-a", annotations)
    assert (tmp_path / "again.json").read_bytes() == first.read_bytes()
    assert again["noise_removed"] == 0 and again["spans"] == len(
        split_spans(load_json(first)["traceEvents"])[1]
    )
    # without spans, the earlier ones stay as they are
    annotate(first, tmp_path / "kept.json", "-a", annotations, "--spans", "none")
    assert (tmp_path / "kept.json").read_bytes() == first.read_bytes()
    # spans of another key replace them
    annotate(first, tmp_path / "names.json", "-a", annotations, "--spans", "name")
    events, spans = split_spans(load_json(tmp_path / "names.json")["traceEvents"])
    assert all(s["args"]["key"] == "name" for s in spans)
    assert not any(is_scope_span(e) for e in events)


@pytest.mark.parametrize("lanes", ["all", "none"])
@pytest.mark.parametrize("spans", ["module", "name", "none"])
def test_annotate_is_idempotent_byte_for_byte(h200, tmp_path, spans, lanes):
    """Annotating an output again, as it was made, gives the same bytes: for every example
    and H200 fixture (these have no node ids, so nothing of theirs is annotated; the
    other passes still run), with and without spans."""
    fixture_annotations = write_json_annotations(tmp_path / "ann.json", {8589934592: [{"name": "x"}]})
    cases = [(t, next(t.parent.glob("kernel_annotations_*.json"))) for t in EXAMPLES]
    cases += [(f, fixture_annotations) for f in h200]
    for i, (trace, annotations_file) in enumerate(cases):
        args = ("-a", annotations_file, "--spans", spans, "--lanes", lanes)
        first, again = tmp_path / f"{i}.json", tmp_path / f"{i}.again.json"
        report = annotate(trace, first, *args)
        annotate(first, again, *args)
        assert again.read_bytes() == first.read_bytes(), trace
        if trace in EXAMPLES and spans == "module" and "compiled" in trace.parent.name:
            assert report["spans"] > 0, "the compiled examples have module spans"


@pytest.mark.parametrize("lanes", ["all", "none"])
def test_a_kernel_whose_repair_took_its_overlap_away_stays_on_the_overlap_lane(tmp_path, lanes):
    """The first run moves kernel 3 and then kernel 2 (which overlap kernel 1 on the
    default stream) to the overlap stream, where kernel 2's start is repaired past kernel
    3's end, so that it no longer overlaps kernel 1. A second run leaves it there (its
    original_stream says an earlier run moved it) instead of moving it back."""
    events = [kernel(100.0, 10.0, 1), kernel(103.0, 7.1, 3), kernel(109.9, 5.0, 2)]
    trace = tmp_path / "t.json"
    trace.write_text(json.dumps({"traceEvents": events}, indent=1))
    ann = write_json_annotations(tmp_path / "a.json", {n: [{"module": f"m.{n}"}] for n in (1, 2, 3)})
    first, again = tmp_path / "first.json", tmp_path / "again.json"
    report = annotate(trace, first, "-a", ann, "--lanes", lanes)
    annotate(first, again, "-a", ann, "--lanes", lanes)
    assert again.read_bytes() == first.read_bytes()
    if lanes == "all":
        assert (report["moved"], report["fixed"]) == (2, 1)
        kernels = {e["name"]: e for e in load_json(first)["traceEvents"] if e.get("cat") == "kernel"}
        assert (kernels["k2"]["tid"], kernels["k2"]["ts"], kernels["k2"]["args"]["original_stream"]) == (
            8,
            110.1,
            7,
        )


@pytest.mark.parametrize("lanes", ["all", "reference"])
@pytest.mark.parametrize("model", ["bert", "resnet50"])
def test_annotating_a_model_shaped_trace_again_gives_the_same_bytes(tmp_path, model, lanes):
    """A trace holding the kernels of a real model (bench/model_modules.json) gets one
    lane named at the end of traceEvents. With ``reference`` lanes (no original_stream)
    annotating the output again moves that lane's kernels back and forth, so it removes
    the name and appends it again, after the white space the trace had before its `]`,
    as the first run did; with ``all`` they stay where they are."""
    sys.path.insert(0, str(ROOT / "bench"))
    import gen_trace
    import model_modules

    trace = tmp_path / "trace.json"
    annotations, _ = gen_trace.generate(
        trace, 0.3, module_runs=4, modules=model_modules.load()[model]["modules"]
    )
    ann = write_json_annotations(tmp_path / "ann.json", annotations)
    first, again = tmp_path / "first.json", tmp_path / "again.json"
    report = annotate(trace, first, "-a", ann, "--lanes", lanes)
    assert report["lanes_named"] == 1 and report["spans"] > 0
    rerun = annotate(first, again, "-a", ann, "--lanes", lanes)
    renamed = 1 if lanes == "reference" else 0
    assert (rerun["metadata_removed"], rerun["lanes_named"]) == (renamed, renamed)
    assert again.read_bytes() == first.read_bytes()


@pytest.mark.parametrize("order", ["reversed", "two streams", "shuffled"])
def test_lanes_out_of_start_order_get_the_spans_of_sorted_ones(tmp_path, order):
    # spans are found walking each lane in start order; a trace that lists a lane's
    # events out of that order (as where a lane gathers the events of several streams)
    # gets the same spans as one that lists them in it
    rng = random.Random(0)
    n = 120
    annotations = {
        node: [{"module": f"m.{'ab'[node // 7 % 2]}.{node % 3}", "stream": 60}] for node in range(1, n)
    }
    annotations[n] = [{"stream": 60}]  # no module: runs end there
    # overlapping events, some of them across replays
    events = [
        kernel(3.0 * node, rng.choice([2.0, 2.5, 4.0, 7.0]), node, correlation=node // 30)
        for node in range(1, n + 1)
    ]
    events[-1]["ts"] = 100.5
    events.sort(key=lambda e: e["ts"])
    # another lane, in order, whose spans come first
    annotations.update({1000 + node: [{"module": "x.y", "stream": 61}] for node in range(3)})
    first = [kernel(5.0 * node, 2.0, 1000 + node) for node in range(3)]
    _, in_order, _ = spans_of(tmp_path, first + events, annotations, "--max-adjust-us", "0")
    if order == "reversed":
        listed = events[::-1]
    elif order == "two streams":
        listed = events[::3] + events[1::3] + events[2::3]
        listed = [e for pair in zip(listed[: n // 2], listed[n // 2 :]) for e in pair]
    else:
        listed = events[:]
        rng.shuffle(listed)
    assert listed != events
    written, spans, report = spans_of(tmp_path, first + listed, annotations, "--max-adjust-us", "0")
    assert spans == in_order and report["spans"] == len(spans)
    assert {s["tid"] for s in spans} == {60, 61} and len(spans) > 30
    check_spans(written, spans)
