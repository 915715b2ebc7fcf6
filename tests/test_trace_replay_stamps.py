"""Replay stamps and equivalent replays through the console script and
``cgfast.annotate_file``: a trace without ``graph node id`` whose graphs launch
identically."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import cgfast
from helpers import generate, write_json_annotations

# Graphs 2 and 4: the same two kernels in the same order and shapes; 6 has another.
GRAPHS = {
    "2": {
        "names": ["_Z1kPf", "_Z1mPf"],
        "nodes": [[0, 0, 0, [], [4, 1, 1], [128, 1, 1]], [1, 0, 1, [0], [4, 1, 1], [128, 1, 1]]],
    },
    "4": {
        "names": ["_Z1kPf", "_Z1mPf"],
        "nodes": [[0, 0, 0, [], [4, 1, 1], [128, 1, 1]], [1, 0, 1, [0], [4, 1, 1], [128, 1, 1]]],
    },
    "6": {"names": ["_Z1zPf"], "nodes": [[0, 0, 0, [], [4, 1, 1], [128, 1, 1]]]},
}


def annotations(labels: dict) -> dict:
    """``labels``: graph -> [annotation of node 0, of node 1]."""
    nodes = {
        str(int(g) << 32 | local): [{"name": name}]
        for g, names in labels.items()
        for local, name in enumerate(names)
    }
    return {"format": "cgfast-annotations", "version": 1, "annotations": nodes, "graphs": GRAPHS}


def trace(stamps: list) -> dict:
    """Three replays (correlations 5, 6, 7) of k then m, launched at 500, 1500, 2500
    on thread 1; ``stamps``: (start, dur, name) ranges on that thread."""
    events = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": name,
            "pid": 1,
            "tid": 1,
            "ts": start,
            "dur": dur,
            "args": {},
        }
        for start, dur, name in stamps
    ]
    for k, correlation in enumerate((5, 6, 7)):
        ts = 1000 * k + 500
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaGraphLaunch",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": 1,
                "args": {"correlation": correlation},
            }
        )
        for i, name in enumerate(("k(float*)", "m(float*)")):
            args = {"correlation": correlation, "grid": [4, 1, 1], "block": [128, 1, 1], "stream": 7}
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": 0,
                    "tid": 7,
                    "ts": ts + 10 * (i + 1),
                    "dur": 5,
                    "args": args,
                }
            )
    return {"traceEvents": events}


def annotate(tmp_path, trace_body: dict, labels: dict, *extra: str) -> tuple:
    t = tmp_path / "t.json"
    a = tmp_path / "a.json"
    out = tmp_path / "out.json"
    t.write_text(json.dumps(trace_body))
    a.write_text(json.dumps(annotations(labels)))
    done = subprocess.run(
        [sys.executable, "-m", "cgfast", "annotate", str(t), "-a", str(a), "-o", str(out), "--json", *extra],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    kernels = [e for e in json.loads(out.read_text())["traceEvents"] if e.get("cat") == "kernel"]
    return json.loads(done.stdout)["recovery"], [
        (e["args"].get("graph node id"), e["args"].get("name")) for e in kernels
    ]


DIFFERENT = {"2": ["attn", "mlp"], "4": ["attn", "other"]}
STAMPS = [(400, 200, "cgfast.replay 4"), (1400, 200, "cgfast.replay 2"), (2400, 200, "cgfast.replay 4")]


def test_stamps_tell_identical_graphs_apart(tmp_path):
    recovery, kernels = annotate(tmp_path, trace(STAMPS), DIFFERENT)
    g2, g4 = 2 << 32, 4 << 32
    assert kernels == [
        (g4, "attn"),
        (g4 | 1, "other"),
        (g2, "attn"),
        (g2 | 1, "mlp"),
        (g4, "attn"),
        (g4 | 1, "other"),
    ]
    assert (recovery["stamped_replays"], recovery["ambiguous_replays"], recovery["equivalent_replays"]) == (
        3,
        0,
        0,
    )


def test_topology_only_gives_the_previous_output(tmp_path):
    recovery, kernels = annotate(tmp_path, trace(STAMPS), DIFFERENT, "--topology-only")
    assert kernels == [(None, None)] * 6
    assert recovery["ambiguous_replays"] == 3
    assert "stamped_replays" not in recovery and "equivalent_replays" not in recovery


def test_unstamped_replays_of_equally_annotated_graphs_are_annotated(tmp_path):
    recovery, kernels = annotate(tmp_path, trace([]), {"2": ["attn", "mlp"], "4": ["attn", "mlp"]})
    g2 = 2 << 32
    assert kernels == [(g2, "attn"), (g2 | 1, "mlp")] * 3
    assert (recovery["equivalent_replays"], recovery["recovered_replays"], recovery["ambiguous_replays"]) == (
        3,
        3,
        0,
    )


def test_malformed_and_untrusted_stamps_are_counted_never_an_error(tmp_path):
    stamps = [(400, 200, "cgfast.replay x"), (1400, 200, "cgfast.replay 9"), (2400, 200, "cgfast.replay 6")]
    recovery, kernels = annotate(tmp_path, trace(stamps), DIFFERENT)
    assert kernels == [(None, None)] * 6
    assert (
        recovery["malformed_stamps"],
        recovery["unknown_stamps"],
        recovery["unfit_stamps"],
        recovery["ambiguous_replays"],
    ) == (1, 1, 1, 3)


def test_annotate_file_takes_topology_only(tmp_path):
    t = tmp_path / "t.json"
    a = tmp_path / "a.json"
    t.write_text(json.dumps(trace(STAMPS)))
    a.write_text(json.dumps(annotations(DIFFERENT)))
    exact = cgfast.annotate_file(str(t), annotations=str(a), output=str(tmp_path / "exact.json"))
    alone = cgfast.annotate_file(
        str(t), annotations=str(a), output=str(tmp_path / "alone.json"), topology_only=True
    )
    assert exact["recovery"]["stamped_replays"] == 3 and exact["annotated"] == 6
    assert alone["recovery"]["ambiguous_replays"] == 3 and alone["annotated"] == 0


@pytest.mark.parametrize("summary_format", ["table", "json"])
def test_summary_counts_the_kernels_of_unresolved_replays(tmp_path, summary_format):
    annotate(tmp_path, trace([]), DIFFERENT)
    done = subprocess.run(
        [sys.executable, "-m", "cgfast", "summary", str(tmp_path / "out.json"), "--format", summary_format],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    if summary_format == "json":
        totals = json.loads(done.stdout)["totals"]
        assert (totals["ambiguous_replay_kernels"], totals["unmatched_replay_kernels"]) == (6, 0)
        assert "unresolved_kernels" not in totals
    else:
        assert "ambiguous      6 of them graph-launched" in done.stdout
        assert "unresolved" not in done.stdout and "unmatched " not in done.stdout


def markers(path) -> list:
    return [
        e["args"].get("cgfast")
        for e in json.loads(path.read_text())["traceEvents"]
        if e.get("cat") == "kernel"
    ]


def summary_json(path) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "cgfast", "summary", str(path), "--format", "json"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["totals"]


def test_events_of_ambiguous_and_unmatched_replays_are_marked(tmp_path):
    # replay 7 launches z: graph 6 has one node, so it matches no graph
    body = trace([])
    for e in body["traceEvents"]:
        if e.get("cat") == "kernel" and e["args"]["correlation"] == 7:
            e["name"] = "z(float*)"
    recovery, _kernels = annotate(tmp_path, body, DIFFERENT)
    assert (recovery["ambiguous_replays"], recovery["unmatched_replays"]) == (2, 1)
    assert markers(tmp_path / "out.json") == ["ambiguous replay"] * 4 + ["unmatched replay"] * 2
    totals = summary_json(tmp_path / "out.json")
    assert (
        totals["ambiguous_replay_kernels"],
        totals["ambiguous_replay_us"],
        totals["unmatched_replay_kernels"],
        totals["unmatched_replay_us"],
    ) == (4, 20.0, 2, 10.0)
    assert "unresolved_kernels" not in totals


def test_annotating_the_output_again_keeps_or_drops_the_markers(tmp_path):
    annotate(tmp_path, trace([]), DIFFERENT)
    first = (tmp_path / "out.json").read_bytes()
    (tmp_path / "t.json").write_bytes(first)
    a = tmp_path / "a.json"
    again = tmp_path / "again.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cgfast",
            "annotate",
            str(tmp_path / "t.json"),
            "-a",
            str(a),
            "-o",
            str(again),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert again.read_bytes() == first  # a marker is replaced by itself, never doubled
    assert all(m == "ambiguous replay" for m in markers(again)) and again.read_text().count('"cgfast"') == 6
    # stamps resolve the replays now: the markers go, the annotations come
    stamped = json.loads(first)
    stamped["traceEvents"] = [
        {"ph": "X", "cat": "user_annotation", "name": n, "pid": 1, "tid": 1, "ts": s, "dur": d, "args": {}}
        for s, d, n in STAMPS
    ] + stamped["traceEvents"]
    (tmp_path / "t.json").write_text(json.dumps(stamped))
    recovery, kernels = annotate(tmp_path, stamped, DIFFERENT)
    assert recovery["stamped_replays"] == 3 and all(name is not None for _, name in kernels)
    assert markers(tmp_path / "out.json") == [None] * 6
    assert "ambiguous_replay_kernels" not in summary_json(tmp_path / "out.json")


def test_a_changed_verdict_replaces_the_marker(tmp_path):
    # first with graph 6 alone: every replay unmatched; then the output again with the twins
    t, a, out = tmp_path / "t.json", tmp_path / "a.json", tmp_path / "out.json"
    t.write_text(json.dumps(trace([])))
    a.write_text(
        json.dumps(
            {"format": "cgfast-annotations", "version": 1, "annotations": {}, "graphs": {"6": GRAPHS["6"]}}
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "cgfast", "annotate", str(t), "-a", str(a), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert markers(out) == ["unmatched replay"] * 6
    annotate(tmp_path, json.loads(out.read_text()), DIFFERENT)
    assert markers(out) == ["ambiguous replay"] * 6
    assert out.read_text().count('"cgfast"') == 6


def test_topology_only_writes_no_markers_and_summary_keeps_unresolved(tmp_path):
    annotate(tmp_path, trace([]), DIFFERENT, "--topology-only")
    assert markers(tmp_path / "out.json") == [None] * 6
    assert '"cgfast"' not in (tmp_path / "out.json").read_text()
    totals = summary_json(tmp_path / "out.json")
    assert totals["unresolved_kernels"] == 6 and "ambiguous_replay_kernels" not in totals


EXAMPLES = sorted(
    (Path(__file__).resolve().parent.parent / "examples").glob("*/000000.h200.pt.trace.json.gz")
)


def annotate_both_ways(trace_path, annotations_path, tmp_path, name) -> tuple:
    """``trace_path`` annotated as is and with ``--topology-only``: both outputs' bytes."""
    outs = []
    for extra in ([], ["--topology-only"]):
        out = tmp_path / f"{name}{len(extra)}.json"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "cgfast",
                "annotate",
                str(trace_path),
                "-a",
                str(annotations_path),
                "-o",
                str(out),
                *extra,
            ],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        outs.append(out.read_bytes())
    return outs


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.parent.name)
def test_fully_recovered_examples_get_no_markers(example, tmp_path):
    # every replay of the H200 examples is recovered: no marker, the output of before
    exact, alone = annotate_both_ways(
        example, next(example.parent.glob("kernel_annotations_*.json")), tmp_path, "out"
    )
    assert exact == alone
    assert b'"ambiguous replay"' not in exact and b'"unmatched replay"' not in exact


def test_traces_with_node_ids_and_the_h200_fixtures_get_no_markers(h200, tmp_path):
    generated = tmp_path / "gen.json"
    annotations = write_json_annotations(tmp_path / "gen_ann.json", generate(generated))
    fixture_annotations = write_json_annotations(
        tmp_path / "ann.json", {8589934592: [{"name": "x", "stream": 60}], 5: ["label"]}
    )
    for trace_path, ann in [(generated, annotations)] + [(f, fixture_annotations) for f in h200]:
        exact, alone = annotate_both_ways(trace_path, ann, tmp_path, trace_path.name)
        assert exact == alone, trace_path
        assert b'"ambiguous replay"' not in exact and b'"unmatched replay"' not in exact
