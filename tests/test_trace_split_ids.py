"""Traces torch 2.15's Cuspy profiler writes: each graphed event carries ``"graph id"``
and only the local ``"graph node id"`` (its lower 32 bits; 0 for a graph's first node),
as ``torch/profiler/_cuspy/trace.py`` writes them (``a["graph id"] = gid`` where the
packed id is not 0, then ``a["graph node id"] = gnid & 0xFFFFFFFF``). ``annotate`` and
``summary`` join them as ``graph id << 32 | graph node id``."""

from __future__ import annotations

import json

import cgfast
from helpers import load_json, split_spans, write_json_annotations

GRAPH = 6


def cuspy_args(packed: int, correlation: int) -> dict:
    """``args`` the way Cuspy's writer fills them for a kernel of node ``packed``."""
    args = {"correlation": correlation}
    if packed:
        args["graph id"] = packed >> 32
        args["graph node id"] = packed & 0xFFFFFFFF
    return args


def cuspy_trace(path, replays=2, nodes=4):
    events = [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}}]
    t = 1000.0
    for r in range(replays):
        for local in range(nodes):
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": f"k{local}",
                    "pid": 0,
                    "tid": 7,
                    "ts": t,
                    "dur": 2.0,
                    "args": cuspy_args(GRAPH << 32 | local, 100 + r),
                }
            )
            t += 3.0
        t += 50.0
    # an eager kernel: no graph id, no node id
    events.append(
        {
            "ph": "X",
            "cat": "kernel",
            "name": "eager",
            "pid": 0,
            "tid": 7,
            "ts": t,
            "dur": 2.0,
            "args": cuspy_args(0, 999),
        }
    )
    path.write_text(json.dumps({"traceEvents": events}))
    return events


def test_annotate_joins_graph_id_and_local_node_id(tmp_path):
    trace = tmp_path / "t.json"
    cuspy_trace(trace)
    assert all(
        e["args"]["graph node id"] < 2**32
        for e in json.loads(trace.read_text())["traceEvents"]
        if "graph id" in e.get("args", {})
    )
    annotations = {
        GRAPH << 32 | local: [{"name": f"op{local}", "module": f"m.l{local // 2}"}] for local in range(4)
    }
    ann = write_json_annotations(tmp_path / "a.json", annotations)
    report = cgfast.annotate_file(trace, annotations=ann, output=tmp_path / "o.json")
    assert report["annotated"] == 8, "every kernel of both replays, local id 0 included"
    assert report["recovery"]["replays"] == 0, "ids are present: nothing to recover"
    events, spans = split_spans(load_json(tmp_path / "o.json")["traceEvents"])
    kernels = [e for e in events if e.get("cat") == "kernel"]
    for e in kernels[:-1]:
        local = e["args"]["graph node id"]
        assert e["args"]["graph id"] == GRAPH and local < 4, "the split fields are left as written"
        assert e["args"]["name"] == f"op{local}" and e["args"]["module"] == f"m.l{local // 2}"
    assert "name" not in kernels[-1]["args"]
    assert [(s["name"], s["ts"]) for s in spans] == [
        ("m", 1000.0),
        ("m.l0", 1000.0),
        ("m.l1", 1006.0),
        ("m", 1062.0),
        ("m.l0", 1062.0),
        ("m.l1", 1068.0),
    ]


def test_summary_counts_local_node_zero_as_graphed(tmp_path):
    trace = tmp_path / "t.annotated.json"
    events = cuspy_trace(trace)
    for e in events:
        if e.get("cat") == "kernel" and "graph id" in e["args"]:
            e["args"]["name"] = f"op{e['args']['graph node id']}"
    trace.write_text(json.dumps({"traceEvents": events}))
    rows = {r["value"]: r for r in cgfast.summarize([trace], by="name")}
    assert rows["op0"]["kernels"] == 2, "local id 0 with a graph id is graphed"
    assert sum(r["kernels"] for r in rows.values()) == 8, "the eager kernel is not summarised"
    assert set(rows) == {"op0", "op1", "op2", "op3"}


def test_recovered_ids_are_written_split_where_the_trace_splits_its_ids(tmp_path):
    """Cuspy writes ``graph id`` and ``graph node id`` together on every graphed event
    (both where the packed id is not 0), so a Cuspy trace whose kernels lack ids lacks
    both; recovery writes them back split when the trace's other events are split."""
    from test_trace_replay_stamps import DIFFERENT, STAMPS, annotations, trace

    body = trace(STAMPS)
    # a memset of graph 6 as Cuspy writes it: the trace's ids are split
    body["traceEvents"].append(
        {
            "ph": "X",
            "cat": "gpu_memset",
            "name": "Memset",
            "pid": 0,
            "tid": 7,
            "ts": 4000,
            "dur": 1,
            "args": {"correlation": 9, "stream": 7, **cuspy_args(6 << 32 | 0, 9)},
        }
    )
    t, a, out = tmp_path / "t.json", tmp_path / "a.json", tmp_path / "o.json"
    t.write_text(json.dumps(body))
    a.write_text(json.dumps(annotations(DIFFERENT)))
    report = cgfast.annotate_file(t, annotations=a, output=out, spans=None)
    assert report["recovery"]["recovered_events"] == 6
    kernels = [e["args"] for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    assert [(k["graph id"], k["graph node id"], k["name"]) for k in kernels] == [
        (4, 0, "attn"),
        (4, 1, "other"),
        (2, 0, "attn"),
        (2, 1, "mlp"),
        (4, 0, "attn"),
        (4, 1, "other"),
    ]
    # read again, the split fields join to the same nodes: annotating the output recovers nothing
    again = cgfast.annotate_file(out, annotations=a, output=tmp_path / "o2.json", spans=None)
    assert again["recovery"]["recovered_events"] == 0 and again["annotated"] == 6
    # without a split event the recovered ids are written whole, as before
    body["traceEvents"].pop()
    t.write_text(json.dumps(body))
    cgfast.annotate_file(t, annotations=a, output=out, spans=None)
    kernels = [e["args"] for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    assert [k["graph node id"] for k in kernels] == [
        4 << 32,
        4 << 32 | 1,
        2 << 32,
        2 << 32 | 1,
        4 << 32,
        4 << 32 | 1,
    ]
    assert not any("graph id" in k for k in kernels)
