"""Replay stamps: under a profiler session, a recorded graph's replay runs inside a
``cgfast.replay <exec id>`` range (fake driver, real torch.profiler on the CPU)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from cgfast import capture  # noqa: E402
from cgfast.capture._patches import patch_class, unpatch_class  # noqa: E402
from fake_graph_driver import FakeCUDAGraph, capturing  # noqa: E402


@pytest.fixture
def op_graphs(fake, monkeypatch):
    """``fake``, with each replay running a CPU op, standing in for the
    ``cudaGraphLaunch`` that a real replay makes on the calling thread."""
    unpatch_class(FakeCUDAGraph)
    plain = FakeCUDAGraph.replay

    def replay(self):
        plain(self)
        torch.ones(1).add_(1)

    monkeypatch.setattr(FakeCUDAGraph, "replay", replay)
    patch_class(FakeCUDAGraph)
    try:
        yield fake
    finally:
        unpatch_class(FakeCUDAGraph)
        monkeypatch.undo()
        patch_class(FakeCUDAGraph)


def captured(driver, name, keep_graph=False, python_instantiate=True):
    g = FakeCUDAGraph(driver, keep_graph=keep_graph, python_instantiate=python_instantiate)
    with capturing(g), capture.mark_kernels(name):
        driver.launch(name)
    return g


def profiled_events(tmp_path, body):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        body()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


def stamps_and_ops(events):
    stamps = [e for e in events if str(e.get("name", "")).startswith("cgfast.replay")]
    ops = [e for e in events if e.get("name") == "aten::add_"]
    return stamps, ops


@pytest.mark.parametrize("python_instantiate", [True, False], ids=["torch>=2.15", "torch<=2.14"])
def test_every_replay_runs_inside_a_stamp_naming_its_exec_graph(op_graphs, tmp_path, python_instantiate):
    capture.enable_annotations()
    a = captured(op_graphs, "a", python_instantiate=python_instantiate)
    b = captured(op_graphs, "b", python_instantiate=python_instantiate)
    order = [a, b, b, a, b]
    events = profiled_events(tmp_path, lambda: [g.replay() for g in order])
    stamps, ops = stamps_and_ops(events)
    assert [s["name"] for s in stamps] == [f"cgfast.replay {g.graph_exec.id}" for g in order]
    assert all(s["cat"] == "user_annotation" for s in stamps)
    # the exec ids are the ones annotation keys use
    assert {k >> 32 for k in capture.get_kernel_annotations()} == {a.graph_exec.id, b.graph_exec.id}
    for stamp, op in zip(stamps, ops):
        assert (stamp["pid"], stamp["tid"]) == (op["pid"], op["tid"])
        assert stamp["ts"] <= op["ts"] and op["ts"] + op["dur"] <= stamp["ts"] + stamp["dur"]


@pytest.mark.parametrize("python_instantiate", [True, False], ids=["torch>=2.15", "torch<=2.14"])
def test_a_kept_graph_first_replayed_under_the_profiler_is_stamped_with_its_exec_id(
    op_graphs, tmp_path, python_instantiate
):
    capture.enable_annotations()
    g = captured(op_graphs, "kept", keep_graph=True, python_instantiate=python_instantiate)
    assert g.graph_exec is None
    stamps, _ = stamps_and_ops(profiled_events(tmp_path, g.replay))
    assert [s["name"] for s in stamps] == [f"cgfast.replay {g.graph_exec.id}"]
    assert {k >> 32 for k in capture.get_kernel_annotations()} == {g.graph_exec.id}
    assert g.replays == 1


def test_no_stamps_outside_a_profiler_session_or_for_unrecorded_graphs(op_graphs, tmp_path, monkeypatch):
    unrecorded = captured(op_graphs, "off")  # annotations off: no exec id known
    capture.enable_annotations()
    recorded = captured(op_graphs, "on")
    opened = []
    real = torch.autograd.profiler.record_function
    monkeypatch.setattr(
        torch.autograd.profiler, "record_function", lambda name: opened.append(name) or real(name)
    )
    recorded.replay()
    assert opened == []
    stamps, ops = stamps_and_ops(profiled_events(tmp_path, lambda: (unrecorded.replay(), recorded.replay())))
    assert [s["name"] for s in stamps] == [f"cgfast.replay {recorded.graph_exec.id}"]
    assert len(ops) == 2 and (recorded.replays, unrecorded.replays) == (2, 1)
