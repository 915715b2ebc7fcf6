"""mark_kernels / mark_stream on the fake driver: which nodes each scope gets."""

from __future__ import annotations

import logging
import warnings

import pytest

from cgfast import capture
from cgfast.capture._interface import NodeType
from fake_graph_driver import FakeCUDAGraph, capturing


def exec_key(cuda_graph: FakeCUDAGraph, node) -> int:
    """The id the profiler reports for ``node`` in replays of ``cuda_graph``."""
    return cuda_graph.graph_exec.id << 32 | node.local_id


def annotations_of(cuda_graph, nodes):
    registry = capture.get_kernel_annotations()
    return [registry.get(exec_key(cuda_graph, node)) for node in nodes]


def test_sibling_scopes_get_only_their_own_nodes(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g):
        before = fake.launch("before")
        with capture.mark_kernels("attention"):
            a1 = fake.launch("qk")
            a2 = fake.launch("softmax")
        between = fake.launch("between")
        with capture.mark_kernels({"name": "mlp", "layer": 3}):
            m1 = fake.launch("gemm")
        after = fake.launch("after")
    assert annotations_of(g, [a1, a2]) == [[{"name": "attention"}]] * 2
    assert annotations_of(g, [m1]) == [[{"name": "mlp", "layer": 3}]]
    assert annotations_of(g, [before, between, after]) == [None, None, None]
    assert len(capture.get_kernel_annotations()) == 3


def test_scope_that_is_the_first_work_of_the_capture(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g):
        with capture.mark_kernels("first"):
            copy = fake.memcpy()
            clear = fake.memset()
            kernel = fake.launch("k")
        fake.launch("rest")
    assert annotations_of(g, [copy, clear, kernel]) == [[{"name": "first"}]] * 3
    assert len(capture.get_kernel_annotations()) == 3


def test_nested_scopes_merge_with_the_innermost_winning(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g), capture.mark_kernels({"name": "outer", "color": "red"}):
        head = fake.launch("head")
        with capture.mark_kernels({"name": "inner"}):
            inner = fake.launch("inner")
            with capture.mark_kernels({"name": "innermost", "color": "blue"}):
                deepest = fake.launch("deepest")
        tail = fake.launch("tail")
    assert annotations_of(g, [head, tail]) == [[{"name": "outer", "color": "red"}]] * 2
    assert annotations_of(g, [inner]) == [[{"name": "inner", "color": "red"}]]
    assert annotations_of(g, [deepest]) == [[{"name": "innermost", "color": "blue"}]]


def test_a_resolve_while_outer_scopes_are_open_keeps_the_innermost_winning(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g):
        with capture.mark_kernels({"name": "outer", "color": "red"}):
            with capture.mark_kernels({"name": "inner"}):
                inner = fake.launch("inner")
            # another graph's capture end or instantiate resolves at any time
            capture.resolve_pending_annotations()
            with capture.mark_kernels({"name": "second", "color": "green"}):
                second = fake.launch("second")
        fake.launch("rest")
    assert annotations_of(g, [inner]) == [[{"name": "inner", "color": "red"}]]
    assert annotations_of(g, [second]) == [[{"name": "second", "color": "green"}]]


def test_first_scope_of_a_stream_that_joins_an_earlier_fork(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    side = fake.new_stream()
    with capturing(g) as main:
        fake.wait_stream(side, main)  # fork before main has any work
        with fake.use(side):
            s1 = fake.launch("side before the scope")
        with capture.mark_kernels("joined"):
            fake.wait_stream(main, side)
            k = fake.launch("k")
            k2 = fake.launch("k2")
        fake.launch("rest")
    assert k.deps == [s1]
    assert annotations_of(g, [k, k2, s1]) == [[{"name": "joined"}], [{"name": "joined"}], None]


def test_only_kernel_memcpy_and_memset_nodes_are_recorded(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g):
        fake.launch("start")
        with capture.mark_kernels("mixed"):
            kept = [fake.launch("k"), fake.memcpy(), fake.memset()]
            skipped = [
                fake.add_node(t)
                for t in (NodeType.HOST, NodeType.EMPTY, NodeType.EVENT_RECORD, NodeType.MEM_ALLOC)
            ]
            kept.append(fake.launch("after the others"))
    assert annotations_of(g, kept) == [[{"name": "mixed"}]] * 4
    assert annotations_of(g, skipped) == [None] * 4


def test_forked_side_stream_joined_back(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    side = fake.new_stream()
    with capturing(g) as main:
        fake.launch("prologue")
        with capture.mark_kernels("block"):
            norm = fake.launch("norm")
            fake.wait_stream(side, main)  # fork
            with capture.mark_kernels("side work"), fake.use(side):
                s1 = fake.launch("side1")
                s2 = fake.launch("side2")
            m1 = fake.launch("main while side runs")
            fake.wait_stream(main, side)  # join
            with capture.mark_kernels("after join"):
                joined = fake.launch("joined")
        epilogue = fake.launch("epilogue")
    assert annotations_of(g, [norm, m1]) == [[{"name": "block"}]] * 2
    assert annotations_of(g, [s1, s2]) == [[{"name": "side work"}]] * 2
    assert annotations_of(g, [joined]) == [[{"name": "after join"}]]
    assert annotations_of(g, [epilogue]) == [None]
    assert joined.deps == [m1, s2]


def test_scope_opened_on_a_side_stream(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    side = fake.new_stream()
    with capturing(g) as main:
        fake.launch("a")
        fake.wait_stream(side, main)
        with fake.use(side), capture.mark_kernels("on side"):
            s = fake.launch("s")
        m = fake.launch("m")
        fake.wait_stream(main, side)
    assert annotations_of(g, [s, m]) == [[{"name": "on side"}], None]


def test_mark_stream_switches_and_records_a_lane(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    side, other = fake.new_stream(), fake.new_stream()
    annotation = {"name": "copy-in"}
    with capturing(g) as main:
        fake.launch("a")
        fake.wait_stream(side, main)
        with capture.mark_stream(side, annotation):
            assert fake.current() is side
            s = fake.launch("s")
        assert fake.current() is main
        fake.wait_stream(other, main)
        with capture.mark_stream(other, "other"):
            o = fake.launch("o")
        with capture.mark_stream(side, "side again"):
            s2 = fake.launch("s2")
        with capture.mark_stream(main, "already current"):
            assert fake.current() is main
            m = fake.launch("m")
        fake.wait_stream(main, side)
        fake.wait_stream(main, other)
    (side_lane,), (other_lane,) = [[a["stream"] for a in annotations_of(g, [n])[0]] for n in (s, o)]
    assert side_lane >= capture._runtime.FIRST_LANE and other_lane >= capture._runtime.FIRST_LANE
    assert side_lane != other_lane
    assert annotations_of(g, [s]) == [[{"name": "copy-in", "stream": side_lane}]]
    assert annotations_of(g, [s2]) == [[{"name": "side again", "stream": side_lane}]]
    assert annotations_of(g, [m]) == [[{"name": "already current"}]]
    assert annotation == {"name": "copy-in"}, "the caller's dict must not change"
    assert capture.lane_for(side) == side_lane and capture.lane_for(other) == other_lane


def test_mark_stream_switches_streams_even_when_disabled(fake):
    side = fake.new_stream()
    g = FakeCUDAGraph(fake)
    with capturing(g) as main:
        fake.launch("a")
        fake.wait_stream(side, main)
        with capture.mark_stream(side, "x"):
            assert fake.current() is side
            fake.launch("s")
        fake.wait_stream(main, side)
    assert dict(capture.get_kernel_annotations()) == {}


def test_lane_for_is_stable_and_distinct():
    first = capture.lane_for("pg:tensor-parallel")
    assert capture.lane_for("pg:tensor-parallel") == first
    assert capture.lane_for("pg:data-parallel") not in (first,)
    assert first >= capture._runtime.FIRST_LANE


def test_child_graph_bodies_get_the_scope_of_their_child_node(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with capture.mark_kernels("with child"):
            k = fake.launch("k")
            child = fake.child_graph(["inside", "inside 2"])
        with capture.mark_kernels("again"):
            child_2 = fake.child_graph(["inside too"])
            k2 = fake.launch("k2")
    assert not [w for w in caught if "child graph" in str(w.message)]
    local = fake.exec_local_ids(child.graph)
    high = g.graph_exec.id << 32
    registry = capture.get_kernel_annotations()
    assert annotations_of(g, [k, k2, child]) == [[{"name": "with child"}], [{"name": "again"}], None]
    # the instance numbers body nodes after the graph's own 4: 4, 5, then 6
    assert [local[n] for n in [*child.body.nodes, *child_2.body.nodes]] == [4, 5, 6]
    assert registry[high | 4] == registry[high | 5] == [{"name": "with child"}]
    assert registry[high | 6] == [{"name": "again"}]
    body_keys = [n.node_id for n in child.body.nodes]  # the body graph's own ids: never reported
    assert not set(body_keys) & set(registry)


def test_nested_child_graphs_keep_the_bodies_unannotated_with_a_warning(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with warnings.catch_warnings(record=True) as caught, capturing(g):
        warnings.simplefilter("always")
        with capture.mark_kernels("outer"):
            k = fake.launch("k")
            child = fake.child_graph(["inside"])
            nested = fake._new_graph()
            inner = fake._register(fake_node(child.body, NodeType.GRAPH))
            inner.body = nested
            child.body.nodes.append(inner)
    assert any("of its own keeps" in str(w.message) for w in caught)
    assert list(capture.get_kernel_annotations()) == [exec_key(g, k)]


def fake_node(graph, node_type):
    from fake_graph_driver import FakeNode

    return FakeNode(graph, node_type, None)


def test_child_graph_bodies_beside_a_conditional_stay_unannotated_with_a_warning(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with warnings.catch_warnings(record=True) as caught, capturing(g):
        warnings.simplefilter("always")
        with capture.mark_kernels("scope"):
            k = fake.launch("k")
            fake.child_graph(["inside"])
            fake.begin_conditional()
            fake.end_conditional()
    assert any("both child-graph and conditional nodes" in str(w.message) for w in caught)
    assert list(capture.get_kernel_annotations()) == [exec_key(g, k)]


def test_scope_inside_a_conditional_body_records_nothing(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fake.launch("a")
        with capture.mark_kernels("around the conditional"):
            fake.begin_conditional()
            with capture.mark_kernels("in body"):
                fake.launch("body kernel")
            fake.end_conditional()
            after = fake.launch("after")
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2
    assert "inside the body of a CUDA graph conditional node" in messages[0]
    assert "contains a conditional node" in messages[1]
    registry = capture.get_kernel_annotations()
    assert list(registry.values()) == [[{"name": "around the conditional"}]]
    assert exec_key(g, after) in registry


def test_an_exception_in_a_scope_records_nothing_and_propagates(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with pytest.raises(ValueError), capturing(g), capture.mark_kernels("failing"):
        fake.launch("k")
        raise ValueError("boom")
    assert dict(capture.get_kernel_annotations()) == {}


def test_a_failing_driver_query_drops_the_scope_and_logs_once(fake, caplog):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with caplog.at_level(logging.DEBUG, logger="cgfast.capture"), capturing(g):
        fake.launch("a")
        fake.failing.add("dependents")
        for name in ("broken", "broken too"):
            with capture.mark_kernels(name):
                fake.launch("k")
        fake.failing.clear()
        with capture.mark_kernels("fine"):
            fine = fake.launch("fine")
    warnings_logged = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings_logged) == 1 and "failed" in warnings_logged[0].getMessage()
    assert list(capture.get_kernel_annotations().values()) == [[{"name": "fine"}]]
    assert exec_key(g, fine) in capture.get_kernel_annotations()


def test_scope_cost_is_proportional_to_the_nodes_it_added(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g):
        for i in range(2000):
            fake.launch(f"k{i}")
        fake.calls.clear()
        with capture.mark_kernels("small"):
            fake.launch("one")
            fake.launch("two")
        calls = dict(fake.calls)
    assert calls == {"capturing_stream": 1, "capture_state": 1, "dependents": 4, "node_type": 2, "node_id": 2}


def test_disabled_and_not_capturing_scopes_touch_no_driver(fake):
    g = FakeCUDAGraph(fake)
    with capturing(g):
        fake.launch("a")
        with capture.mark_kernels("disabled"):
            fake.launch("k")
    assert fake.calls.get("capture_state", 0) == 0
    capture.enable_annotations()
    fake.calls.clear()
    with capture.mark_kernels("eager"):
        assert fake.launch("eager") is None
    assert fake.calls == {}
    assert dict(capture.get_kernel_annotations()) == {}


def test_with_patches_and_no_capture_in_progress_scopes_ask_nothing(fake):
    capture.enable_annotations()  # asks once whether a capture is under way
    fake.calls.clear()
    with capture.mark_kernels("eager"):
        fake.launch("eager")
    assert fake.calls == {}
    g = FakeCUDAGraph(fake)
    with capturing(g):
        fake.calls.clear()
        with fake.use(fake.default_stream), capture.mark_kernels("another stream, not capturing"):
            assert fake.launch("eager meanwhile") is None
        assert fake.calls.get("capturing_stream") == 1 and "capture_state" not in fake.calls
        with capture.mark_kernels("captured"):
            k = fake.launch("k")
    assert annotations_of(g, [k]) == [[{"name": "captured"}]]
    fake.calls.clear()
    with capture.mark_kernels("eager again"):
        fake.launch("eager")
    assert fake.calls == {}


def test_captures_in_progress_are_counted_through_failures(fake):
    state = capture._runtime.runtime
    g = FakeCUDAGraph(fake)
    with capturing(g):
        assert state.captures_in_progress == 1
    assert state.captures_in_progress == 0
    with pytest.raises(ValueError), capturing(FakeCUDAGraph(fake)):
        raise ValueError("inside the capture")
    assert state.captures_in_progress == 0
    side = fake.new_stream()
    with pytest.raises(RuntimeError, match="Unjoined"), capturing(FakeCUDAGraph(fake)) as main:
        fake.launch("a")
        fake.wait_stream(side, main)
        fake.launch("s", stream=side)
    assert state.captures_in_progress == 0


def test_without_a_backend_every_scope_is_a_no_op(fake):
    capture._runtime.runtime.use_backend(None, reason="testing the no-op path", streams=fake)
    capture.enable_annotations()
    assert not capture.is_available()
    assert capture.backend() == "none: testing the no-op path"
    side = fake.new_stream()
    g = FakeCUDAGraph(fake)
    with capturing(g) as main:
        with capture.mark_kernels("k"):
            fake.launch("k")
        fake.wait_stream(side, main)
        with capture.mark_stream(side, "s"):
            assert fake.current() is side
            fake.launch("s")
        fake.wait_stream(main, side)
    assert dict(capture.get_kernel_annotations()) == {}
    assert capture.get_graph_topology() == {}


def test_manual_enter_exit_as_generated_code_does(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g):
        fake.launch("a")
        ctx = capture.mark_kernels(
            {"name": "triton_poi_fused_add_0", "kernel_name": "triton_poi_fused_add_0"}
        )
        ctx.__enter__()
        k = fake.launch("triton_poi_fused_add_0")
        ctx.__exit__(None, None, None)
    assert annotations_of(g, [k])[0][0]["kernel_name"] == "triton_poi_fused_add_0"


def test_an_open_scope_cannot_be_entered_twice(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g):
        fake.launch("a")
        scope = capture.mark_kernels("once")
        with scope, pytest.raises(RuntimeError, match="already open"):
            scope.__enter__()


@pytest.mark.parametrize("bad", [None, 3, ["name"], b"bytes"])
def test_annotations_must_be_str_or_dict(bad):
    with pytest.raises(TypeError, match="str or a dict"):
        capture.mark_kernels(bad)
    with pytest.raises(TypeError, match="str or a dict"):
        capture.mark_stream(object(), bad)


def test_the_annotation_is_snapshotted_at_entry(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    annotation = {"name": "before"}
    with capturing(g):
        fake.launch("a")
        with capture.mark_kernels(annotation):
            k = fake.launch("k")
        annotation["name"] = "changed later"
    assert annotations_of(g, [k]) == [[{"name": "before"}]]
