"""Saving annotations through the Rust core, and the profiler's trace handler."""

from __future__ import annotations

import gzip
import json
import os
import re

import pytest

from cgfast import capture
from fake_graph_driver import FakeCUDAGraph, capturing

_cgfast = pytest.importorskip("cgfast._cgfast")
needs_annotation_files = pytest.mark.skipif(
    not hasattr(_cgfast, "write_annotations"), reason="the Rust extension has no write_annotations yet"
)


def record_two_graphs(driver):
    capture.enable_annotations()
    graphs = []
    for name in ("prefill", "decode"):
        g = FakeCUDAGraph(driver)
        with capturing(g):
            driver.memcpy()
            with capture.mark_kernels({"name": name, "layer": 0}):
                driver.launch(f"_Z{len(name)}{name}v", grid=(4, 2, 1), block=(256, 1, 1))
            driver.launch("untagged")
        graphs.append(g)
    return graphs


@needs_annotation_files
@pytest.mark.parametrize("file_name", ["annotations.json", "annotations.json.gz"])
def test_recorded_annotations_and_topology_round_trip(fake, tmp_path, file_name):
    from cgfast.annotations import load_graphs

    record_two_graphs(fake)
    path = tmp_path / file_name
    capture.save_annotations(path)
    if file_name.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            json.loads(f.read())
    else:
        json.loads(path.read_text())
    assert capture.load_annotations(path) == dict(capture.get_kernel_annotations())
    assert load_graphs(path) == capture.get_graph_topology()


@needs_annotation_files
def test_explicit_annotations_are_saved_as_given(fake, tmp_path):
    record_two_graphs(fake)
    given = {5 << 32 | 1: [{"name": "given"}]}
    path = tmp_path / "given.json"
    capture.save_annotations(path, given)
    assert capture.load_annotations(path) == given


@needs_annotation_files
def test_trace_handler_writes_trace_annotations_and_annotated_trace(fake, tmp_path):
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    from cgfast.profiler import trace_handler

    record_two_graphs(fake)
    handler = trace_handler(tmp_path / "traces")
    with profile(activities=[ProfilerActivity.CPU], on_trace_ready=handler):
        torch.ones(8).add_(1)
    names = sorted(os.listdir(tmp_path / "traces"))
    trace = os.path.basename(handler.trace_path)
    assert re.fullmatch(r"000000\.[^.]+_\d+\.\d+\.pt\.trace\.json\.gz", trace), trace
    assert f"kernel_annotations_rank0_{os.getpid()}.json" in names
    annotated = trace.replace(".json.gz", ".annotated.json.gz")
    assert annotated in names
    with gzip.open(tmp_path / "traces" / annotated, "rt") as f:
        assert "traceEvents" in json.load(f)
    assert capture.load_annotations(handler.annotations_path) == dict(capture.get_kernel_annotations())


def test_trace_handler_needs_a_directory():
    from cgfast.profiler import trace_handler

    with pytest.raises(ValueError):
        trace_handler("")


def test_default_worker_name_starts_with_the_rank():
    from cgfast.profiler import default_worker_name

    assert re.fullmatch(r"000003\..+_\d+", default_worker_name(3))
    assert default_worker_name().startswith("000000.")
