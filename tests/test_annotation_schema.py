"""The annotation file's JSON Schema (docs/reference/annotation-files.schema.json) holds
for what the capture layer writes and for the files bundled in examples/, and refuses
what the trace processor refuses."""

from __future__ import annotations

import gzip
import json
import pathlib

import pytest

from cgfast import capture
from cgfast.annotations import save_annotations
from fake_graph_driver import FakeCUDAGraph, capturing

jsonschema = pytest.importorskip("jsonschema")

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "reference" / "annotation-files.schema.json").read_text())
validator = jsonschema.Draft202012Validator(SCHEMA)


def load(path: pathlib.Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as file:
        return json.load(file)


def test_the_schema_is_a_valid_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("name", ["annotations.json", "annotations.json.gz"])
def test_what_capture_saves_is_valid(fake, tmp_path, name):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g):
        fake.memcpy()
        with capture.mark_kernels({"name": "attention", "layer": 0}), capture.mark_kernels("inner"):
            fake.launch("_Z9attentionv", grid=(4, 2, 1), block=(256, 1, 1))
        fake.memset()
        fake.launch("untagged")
    path = tmp_path / name
    capture.save_annotations(path)
    document = load(path)
    assert document["graphs"] and document["annotations"]
    validator.validate(document)


def test_stacks_are_valid(tmp_path):
    path = tmp_path / "stacks.json"
    node = 2 << 32 | 1
    save_annotations(path, {node: [{"module": "layers.0"}]}, stacks={node: ["model.py:10:forward"]})
    document = load(path)
    assert "stacks" in document
    validator.validate(document)


def test_op_counts_are_valid_and_must_be_counts(fake, tmp_path):
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode

    class LaunchEachOp(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            fake.launch(str(func))
            return out

    model = torch.nn.Linear(4, 4)
    # the launcher goes under the counting mode, which the capture's begin pushes
    with (
        capture.annotate_modules(model, flops=True),
        torch.no_grad(),
        LaunchEachOp(),
        capturing(FakeCUDAGraph(fake)),
    ):
        model(torch.randn(2, 4))
    path = tmp_path / "counts.json"
    capture.save_annotations(path)
    document = load(path)
    counted = [items[-1] for items in document["annotations"].values() if "flops" in items[-1]]
    assert counted and any(item["flops"] > 0 for item in counted)
    validator.validate(document)
    for bad in (-1, "32", 1.5):
        document["annotations"][next(iter(document["annotations"]))] = [{"flops": bad, "bytes": 0}]
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(document)


def test_traces_are_valid(tmp_path):
    path = tmp_path / "traces.json"
    trace = tmp_path / "worker0.123.pt.trace.json.gz"
    save_annotations(path, {2 << 32: [{"module": "fc"}]}, traces=[trace, str(trace) + ".1"])
    document = load(path)
    assert document["traces"] == [str(trace), str(trace) + ".1"]
    validator.validate(document)


@pytest.mark.parametrize("path", sorted(ROOT.glob("examples/*/kernel_annotations_rank*.json")), ids=str)
def test_bundled_annotation_files_are_valid(path):
    validator.validate(load(path))


@pytest.mark.parametrize(
    "broken",
    [
        {"annotations": {"1": [{}]}},  # no format
        {"format": "cgfast-annotations", "version": 1, "annotations": {"node": [{}]}},
        {"format": "cgfast-annotations", "version": 1, "annotations": {"1": {"name": "x"}}},
        {
            "format": "cgfast-annotations",
            "version": 1,
            "annotations": {},
            "graphs": {"2": {"names": [], "nodes": [[0, 0, -1, []]]}},
        },
        {"format": "cgfast-annotations", "version": 1, "annotations": {}, "traces": "/runs/t.json"},
        {"format": "cgfast-annotations", "version": 1, "annotations": {}, "traces": ["/runs/t.json", 3]},
        {"format": "cgfast-annotations", "version": 1, "annotations": {}, "traces": [""]},
    ],
)
def test_files_the_reader_refuses_are_invalid(tmp_path, broken):
    from cgfast import load_annotations

    with pytest.raises(jsonschema.ValidationError):
        validator.validate(broken)
    if "format" in broken:
        path = tmp_path / "broken.json"
        path.write_text(json.dumps(broken))
        with pytest.raises(Exception, match=r"broken\.json"):
            load_annotations(path)
