"""Launch stacks in annotation files reach the trace: args launch / launch_stack on
annotated kernels, and ``cgfast summary --by launch``."""

from __future__ import annotations

import cgfast
from cgfast import annotations as annotation_files
from trace_files import cgfast as run_cgfast
from trace_files import kernel, read_json, write_trace

NODE_A = 2 << 32 | 0
NODE_B = 2 << 32 | 1
NODE_C = 2 << 32 | 2
STACK_A = ["model.py:10:forward", "train.py:3:step"]
STACK_B = ["model.py:11:forward", "train.py:3:step"]


def job(tmp_path, stacks):
    events = [
        kernel(100.0, 5.0, node=NODE_A, name="gemm"),
        kernel(106.0, 2.0, node=NODE_B, name="relu"),
        kernel(109.0, 1.0, node=NODE_C, name="other"),
    ]
    trace = write_trace(tmp_path / "trace.json", events)
    annotations = {NODE_A: [{"module": "lin"}], NODE_B: [{"module": "act"}]}
    path = tmp_path / "annotations.json"
    annotation_files.save_annotations(path, annotations, stacks=stacks)
    return trace, path


def kernels_of(path):
    return {
        e["args"]["graph node id"]: e["args"]
        for e in read_json(path)["traceEvents"]
        if e.get("cat") == "kernel"
    }


def test_annotated_kernels_get_their_launch_frames(tmp_path):
    trace, annotations = job(tmp_path, {NODE_A: STACK_A, NODE_B: STACK_B, NODE_C: ["x.py:1:f"]})
    out = tmp_path / "out.json"
    cgfast.annotate_file(trace, annotations=str(annotations), output=str(out))
    args = kernels_of(out)
    assert args[NODE_A]["launch"] == "model.py:10:forward"
    assert args[NODE_A]["launch_stack"] == "model.py:10:forward\ntrain.py:3:step"
    assert args[NODE_B]["launch"] == "model.py:11:forward"
    assert "launch" not in args[NODE_C]  # not annotated: left as it was
    summary = run_cgfast("summary", str(out), "--by", "launch")
    assert summary.returncode == 0, summary.stderr
    assert "model.py:10:forward" in summary.stdout and "model.py:11:forward" in summary.stdout


def test_without_stacks_the_output_is_unchanged(tmp_path):
    trace, with_empty = job(tmp_path, None)
    out_plain = tmp_path / "plain.json"
    cgfast.annotate_file(trace, annotations=str(with_empty), output=str(out_plain))
    assert "stacks" not in with_empty.read_text()
    assert all("launch" not in a for a in kernels_of(out_plain).values())
