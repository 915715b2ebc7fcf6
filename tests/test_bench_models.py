"""The model-shaped traces bench/bench_spans.py measures: the module sequences are those
of the real models (recomputed here), and the generator lays them out as a model runs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import cgfast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import gen_trace  # noqa: E402
import model_modules  # noqa: E402


def test_compiled_sequences_are_the_examples_graphs():
    assert model_modules.compiled_sequences() == {
        k: v for k, v in model_modules.load().items() if k.startswith("compiled-")
    }


@pytest.mark.parametrize("name", model_modules.EAGER)
def test_eager_sequences_are_what_the_models_launch(name):
    pytest.importorskip("timm")
    pytest.importorskip("transformers")
    recomputed = model_modules.eager_sequence(name)
    assert recomputed == model_modules.load()[name]
    assert len(recomputed["modules"]) > 50


def test_a_model_shaped_trace_has_the_models_modules_on_one_stream(tmp_path):
    modules = model_modules.load()["vit_small"]["modules"]
    trace = tmp_path / "trace.json"
    annotations, topology = gen_trace.generate(trace, 0.3, modules=modules)
    assert all(len(nodes) == len(modules) for nodes in topology.values())
    for graph in topology:
        expected = {graph << 32 | i: m for i, m in enumerate(modules) if m}
        got = {node: items[0]["module"] for node, items in annotations.items() if node >> 32 == graph}
        assert got == expected
    events = json.loads(trace.read_text())["traceEvents"]
    graphed = [e for e in events if e.get("args", {}).get("graph node id", 0) != 0]
    assert graphed and {e["tid"] for e in graphed} == {gen_trace.MAIN}


@pytest.mark.parametrize("name,low,high", [("compiled-transformer", 0.2, 0.5), ("resnet50", 0.9, 1.3)])
def test_spans_per_kernel_follow_the_model(tmp_path, name, low, high):
    trace = tmp_path / "trace.json"
    annotations, topology = gen_trace.generate(trace, 1, modules=model_modules.load()[name]["modules"])
    json_path, _ = gen_trace.write_annotations(tmp_path, annotations, topology)
    report = cgfast.annotate_file(trace, json_path, tmp_path / "out.json")
    assert low < report["spans"] / report["annotated"] < high
