"""Traces torch 2.15 bakes annotations into at export (``export_chrome_trace(...,
cuda_graph_annotations=...)``, ``graph_lanes="none"``): the top-level
``"cudaGraphInlineAnnotated": true``, each graphed event's annotation spliced into its
``args`` by torch's own ``_annotation_args``, a named stream as ``annotated_stream``.
Such a trace is summarised as it is; annotating it again adds only what the new
annotations add, and annotating that output again changes nothing."""

from __future__ import annotations

import json

import pytest

import cgfast
from helpers import split_spans, write_json_annotations

export = pytest.importorskip("torch.profiler._chrome_trace_export")

GRAPH = 6
ANNOTATIONS = {
    GRAPH << 32 | local: [
        {"name": f"op{local}", "module": f"m.l{local // 2}", **({"stream": 61} if local == 3 else {})}
    ]
    for local in range(4)
}


def baked_trace(path, replays=2):
    """The trace as torch's exporter writes it: events as text, the annotation's
    fragment appended to the kernel's own args."""
    events = ['{"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}}']
    t = 1000.0
    for r in range(replays):
        for local in range(4):
            fragment, stream, _ = export._annotation_args(ANNOTATIONS[GRAPH << 32 | local])
            parts = [
                f'"correlation": {100 + r}',
                '"stream": 7',
                f'"graph id": {GRAPH}',
                f'"graph node id": {local}',
                fragment,
            ]
            if stream is not None:
                parts.append(f'"annotated_stream": {stream}')
            events.append(
                f'{{"ph": "X", "cat": "kernel", "name": "k{local}", "pid": 0, "tid": 7, "ts": {t}, "dur": 2.0, "args": {{{", ".join(parts)}}}}}'
            )
            t += 3.0
        t += 50.0
    path.write_text(
        '{\n"schemaVersion": 1,\n'
        f'"{export._INLINE_ANNOTATED_KEY}": true,\n'
        '"traceEvents": [\n' + ",\n".join(events) + "\n]}\n"
    )


def no_duplicate_keys(pairs):
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicated keys: {keys}"
    return dict(pairs)


def load(path):
    return json.loads(path.read_text(), object_pairs_hook=no_duplicate_keys)


def test_a_baked_trace_is_summarised_as_it_is(tmp_path):
    trace = tmp_path / "t.json"
    baked_trace(trace)
    assert load(trace)["cudaGraphInlineAnnotated"] is True
    rows = {r["value"]: r for r in cgfast.summarize([trace], by="module")}
    assert {v: r["kernels"] for v, r in rows.items()} == {"m.l0": 4, "m.l1": 4}


@pytest.mark.parametrize("lanes", ["none", "all"])
def test_annotating_a_baked_trace_adds_only_the_new_annotations(tmp_path, lanes):
    trace, ann = tmp_path / "t.json", tmp_path / "a.json"
    baked_trace(trace)
    baked = {(e["name"], e.get("ts")): e for e in load(trace)["traceEvents"]}
    # the same annotations, and one new key
    again = {n: [{**items[0], "layer": str(n & 3)}] for n, items in ANNOTATIONS.items()}
    write_json_annotations(ann, again)
    out = tmp_path / "o.json"
    report = cgfast.annotate_file(trace, annotations=ann, output=out, lanes=lanes)
    assert report["annotated"] == 8 and report["spans"] > 0
    written = load(out)
    assert written["cudaGraphInlineAnnotated"] is True
    events, spans = split_spans(written["traceEvents"])
    assert len(spans) == report["spans"]
    for e in events:
        if e.get("cat") != "kernel":
            continue
        before = baked[(e["name"], e["ts"])]["args"]
        local = e["args"]["graph node id"]
        added = {k: v for k, v in e["args"].items() if k not in before}
        if lanes == "none":
            assert added == {"layer": str(local)}, e
            assert {k: e["args"][k] for k in before} == before, "what the export baked stays as it was"
        else:
            moved = {"stream": 61, "original_stream": 7} if local == 3 else {}
            assert added == {"layer": str(local), **({"original_stream": 7} if local == 3 else {})}
            assert {k: e["args"][k] for k in before} == {
                **before,
                **{k: v for k, v in moved.items() if k in before},
            }
    # idempotent: annotating the output again gives the same events and spans
    out2 = tmp_path / "o2.json"
    report2 = cgfast.annotate_file(out, annotations=ann, output=out2, lanes=lanes)
    assert report2["spans"] == report["spans"]
    assert load(out2) == written
