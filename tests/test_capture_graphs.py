"""Capture lifecycle on the fake driver: stamping, resolving, remapping, recording()."""

from __future__ import annotations

import logging

import pytest

from cgfast import capture
from cgfast.capture._patches import patch_class, unpatch_class
from cgfast.capture._runtime import runtime
from fake_graph_driver import FakeCUDAGraph, capturing

BOTH_TORCH_STYLES = pytest.mark.parametrize(
    "python_instantiate", [True, False], ids=["torch>=2.15", "torch<=2.14"]
)


def capture_one(driver, name, keep_graph=False, python_instantiate=True, kernels=2):
    g = FakeCUDAGraph(driver, keep_graph=keep_graph, python_instantiate=python_instantiate)
    with capturing(g):
        driver.launch("prologue")
        with capture.mark_kernels(name):
            nodes = [driver.launch(f"{name}{i}") for i in range(kernels)]
    return g, nodes


def keys_of(graph_id, nodes):
    return {graph_id << 32 | node.local_id for node in nodes}


@BOTH_TORCH_STYLES
def test_keys_are_exec_ids_after_capture(fake, python_instantiate):
    capture.enable_annotations()
    g, nodes = capture_one(fake, "a", python_instantiate=python_instantiate)
    capture_id = nodes[0].graph.id
    assert g.graph_exec.id != capture_id
    assert set(capture.get_kernel_annotations()) == keys_of(g.graph_exec.id, nodes)


@BOTH_TORCH_STYLES
def test_graphs_captured_in_sequence_keep_their_own_keys(fake, python_instantiate):
    capture.enable_annotations()
    g1, n1 = capture_one(fake, "first", python_instantiate=python_instantiate)
    first = {k: list(v) for k, v in capture.get_kernel_annotations().items()}
    g2, n2 = capture_one(fake, "second", python_instantiate=python_instantiate)
    registry = capture.get_kernel_annotations()
    assert set(registry) == keys_of(g1.graph_exec.id, n1) | keys_of(g2.graph_exec.id, n2)
    assert {k: registry[k] for k in first} == first
    assert all(registry[k] == [{"name": "second"}] for k in keys_of(g2.graph_exec.id, n2))


@BOTH_TORCH_STYLES
def test_keep_graph_is_remapped_at_instantiate_and_rekeyed_on_reinstantiate(fake, python_instantiate):
    capture.enable_annotations()
    g, nodes = capture_one(fake, "kept", keep_graph=True, python_instantiate=python_instantiate)
    capture_id = nodes[0].graph.id
    assert set(capture.get_kernel_annotations()) == keys_of(capture_id, nodes)
    assert set(capture.get_graph_topology()) == {capture_id}
    g.instantiate()
    first_exec = g.graph_exec.id
    assert set(capture.get_kernel_annotations()) == keys_of(first_exec, nodes)
    g.replay()
    assert set(capture.get_kernel_annotations()) == keys_of(first_exec, nodes)
    g.instantiate()
    assert g.graph_exec.id != first_exec
    assert set(capture.get_kernel_annotations()) == keys_of(g.graph_exec.id, nodes)
    assert set(capture.get_graph_topology()) == {g.graph_exec.id}
    assert all(v == [{"name": "kept"}] for v in capture.get_kernel_annotations().values())


@BOTH_TORCH_STYLES
def test_keep_graph_instantiated_inside_replay(fake, python_instantiate):
    capture.enable_annotations()
    g, nodes = capture_one(fake, "replayed", keep_graph=True, python_instantiate=python_instantiate)
    g.replay()
    assert set(capture.get_kernel_annotations()) == keys_of(g.graph_exec.id, nodes)


def test_remapping_one_graph_leaves_another_pending_graph_alone(fake):
    capture.enable_annotations()
    kept, kept_nodes = capture_one(fake, "kept", keep_graph=True)
    other, other_nodes = capture_one(fake, "other")
    kept_capture_id = kept_nodes[0].graph.id
    assert set(capture.get_kernel_annotations()) == keys_of(kept_capture_id, kept_nodes) | keys_of(
        other.graph_exec.id, other_nodes
    )
    kept.instantiate()
    assert set(capture.get_kernel_annotations()) == keys_of(kept.graph_exec.id, kept_nodes) | keys_of(
        other.graph_exec.id, other_nodes
    )


def test_recaptured_graph_object_gets_fresh_keys_and_old_ones_stay(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g), capture.mark_kernels("v1"):
        old = fake.launch("k")
    old_exec = g.graph_exec.id
    with capturing(g), capture.mark_kernels("v2"):
        new = fake.launch("k")
    registry = capture.get_kernel_annotations()
    assert registry[old_exec << 32 | old.local_id] == [{"name": "v1"}]
    assert registry[g.graph_exec.id << 32 | new.local_id] == [{"name": "v2"}]


def test_capture_while_disabled_records_nothing_even_if_enabled_before_instantiate(fake):
    g, _nodes = capture_one(fake, "off", keep_graph=True)
    capture.enable_annotations()
    g.instantiate()
    assert dict(capture.get_kernel_annotations()) == {}
    capture.remap_to_exec_graph(g)  # captured under the patch while off: nothing to do
    assert dict(capture.get_kernel_annotations()) == {}


def test_clear_forgets_everything_and_later_captures_record(fake):
    capture.enable_annotations()
    kept, _ = capture_one(fake, "kept", keep_graph=True)
    capture_one(fake, "done")
    assert capture.get_kernel_annotations() and capture.get_graph_topology()
    capture.clear_kernel_annotations()
    assert dict(capture.get_kernel_annotations()) == {}
    assert capture.get_graph_topology() == {}
    kept.instantiate()
    assert dict(capture.get_kernel_annotations()) == {}
    g, nodes = capture_one(fake, "after clear")
    assert set(capture.get_kernel_annotations()) == keys_of(g.graph_exec.id, nodes)


def test_pending_scopes_are_cleared_too(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g):
        with capture.mark_kernels("pending when cleared"):
            fake.launch("k")
        capture.clear_kernel_annotations()
        with capture.mark_kernels("kept"):
            kept = fake.launch("k2")
    assert set(capture.get_kernel_annotations()) == {g.graph_exec.id << 32 | kept.local_id}


def test_drop_graph_annotations(fake):
    capture.enable_annotations()
    g1, _ = capture_one(fake, "dropped")
    g2, n2 = capture_one(fake, "kept")
    capture.drop_graph_annotations(g1.graph_exec.id)
    assert set(capture.get_kernel_annotations()) == keys_of(g2.graph_exec.id, n2)
    assert set(capture.get_graph_topology()) == {g2.graph_exec.id}
    capture.drop_graph_annotations([g2.graph_exec.id])
    assert dict(capture.get_kernel_annotations()) == {} and capture.get_graph_topology() == {}


def test_a_failed_capture_leaves_no_keys(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    side = fake.new_stream()
    with pytest.raises(RuntimeError, match="Unjoined"), capturing(g) as main:
        fake.launch("a")
        fake.wait_stream(side, main)
        with capture.mark_kernels("never joined"), fake.use(side):
            fake.launch("s")
    assert dict(capture.get_kernel_annotations()) == {}
    assert capture.get_graph_topology() == {}
    h, nodes = capture_one(fake, "next")
    assert set(capture.get_kernel_annotations()) == keys_of(h.graph_exec.id, nodes)


def test_unpatched_capture_needs_a_kept_graph_to_remap(fake):
    unpatch_class(FakeCUDAGraph)
    try:
        capture.enable_annotations()
        capture.uninstall()  # (enable_annotations installs torch's class)
        kept, kept_nodes = capture_one(fake, "kept", keep_graph=True)
        kept.instantiate()
        assert set(capture.get_kernel_annotations()) == set()  # scopes still pending
        capture.remap_to_exec_graph(kept)
        assert set(capture.get_kernel_annotations()) == keys_of(kept.graph_exec.id, kept_nodes)
        assert set(capture.get_graph_topology()) == {kept.graph_exec.id}
        gone, _ = capture_one(fake, "gone")
        with pytest.raises(RuntimeError, match="capture id is unknown"):
            capture.remap_to_exec_graph(gone)
    finally:
        patch_class(FakeCUDAGraph)


def test_recording_started_inside_a_capture_takes_it_over(fake):
    unpatch_class(FakeCUDAGraph)
    g = FakeCUDAGraph(fake)
    try:
        with capturing(g):
            fake.launch("before")
            with capture.recording():
                patch_class(FakeCUDAGraph)  # what install() does to torch's class
                assert not runtime.no_capture_in_progress()
                with capture.mark_kernels("inside"):
                    k = fake.launch("k")
    except BaseException:
        patch_class(FakeCUDAGraph)
        raise
    assert set(capture.get_kernel_annotations()) == keys_of(g.graph_exec.id, [k])
    assert runtime.no_capture_in_progress()


def test_manual_resolve_then_remap_in_the_patched_flow_is_harmless(fake):
    capture.enable_annotations()
    g = FakeCUDAGraph(fake)
    with capturing(g):
        with capture.mark_kernels("x"):
            k = fake.launch("k")
        capture.resolve_pending_annotations()
    capture.remap_to_exec_graph(g)
    assert dict(capture.get_kernel_annotations()) == {g.graph_exec.id << 32 | k.local_id: [{"name": "x"}]}


def test_remap_rejects_what_is_not_a_graph(fake):
    with pytest.raises(TypeError, match="CUDAGraph"):
        capture.remap_to_exec_graph(object())


def test_recording_enables_for_its_extent_and_keeps_earlier_annotations(fake):
    capture.enable_annotations()
    first, first_nodes = capture_one(fake, "earlier")
    capture.disable_annotations()
    with capture.recording():
        assert capture.annotations_enabled()
        with capture.mark_kernels("warm-up"):
            assert fake.launch("eager") is None
        second, second_nodes = capture_one(fake, "inside")
    assert not capture.annotations_enabled()
    assert set(capture.get_kernel_annotations()) == keys_of(first.graph_exec.id, first_nodes) | keys_of(
        second.graph_exec.id, second_nodes
    )


def test_recording_restores_an_enabled_state_and_nests(fake):
    capture.enable_annotations()
    outer = capture.recording()
    with outer:
        with capture.recording():
            assert capture.annotations_enabled()
        assert capture.annotations_enabled()
    assert capture.annotations_enabled()
    capture.disable_annotations()
    with capture.recording():
        with capture.recording():
            pass
        assert capture.annotations_enabled()
    assert not capture.annotations_enabled()


def test_recording_remaps_a_kept_graph_instantiated_after_it_ends(fake):
    with capture.recording():
        g, nodes = capture_one(fake, "kept", keep_graph=True)
    g.instantiate()
    assert set(capture.get_kernel_annotations()) == keys_of(g.graph_exec.id, nodes)


def test_patching_is_idempotent_and_reversible(fake):
    wrapped = FakeCUDAGraph.capture_end
    assert patch_class(FakeCUDAGraph)
    assert FakeCUDAGraph.capture_end is wrapped
    unpatch_class(FakeCUDAGraph)
    assert FakeCUDAGraph.capture_end is FakeCUDAGraph.__dict__["capture_end"]
    assert not hasattr(FakeCUDAGraph.capture_end, "__wrapped__")
    unpatch_class(FakeCUDAGraph)
    patch_class(FakeCUDAGraph)
    assert hasattr(FakeCUDAGraph.capture_end, "__wrapped__")


def test_patching_a_class_that_cannot_capture_is_refused():
    class NotAGraph:
        def replay(self):
            pass

    assert not patch_class(NotAGraph)
    assert NotAGraph.__dict__["replay"].__name__ == "replay"
    assert not hasattr(NotAGraph.replay, "__wrapped__")


def test_inherited_methods_are_restored_by_unpatching():
    class Base:
        def capture_begin(self):
            return "base"

        def capture_end(self):
            pass

        def raw_cuda_graph_exec(self):
            return 0

    class Derived(Base):
        pass

    assert patch_class(Derived)
    assert "capture_begin" in Derived.__dict__
    unpatch_class(Derived)
    assert "capture_begin" not in Derived.__dict__
    assert Derived().capture_begin() == "base"


@BOTH_TORCH_STYLES
def test_a_backend_taken_away_during_a_capture_is_no_failure(fake, python_instantiate, caplog):
    """use_backend(None) while a graph captures: the capture ends, instantiates and replays,
    its scopes are resolved (nothing is left pending) and no driver query is reported as
    failed, for none was made."""
    capture.enable_annotations()
    g = FakeCUDAGraph(fake, python_instantiate=python_instantiate)
    with caplog.at_level(logging.DEBUG, logger="cgfast.capture"), capturing(g):
        with capture.mark_kernels("before"):
            fake.launch("k")
        runtime.use_backend(None, reason="taken away", streams=fake)
    g.replay()
    assert not runtime.recorder.has_pending()
    assert "failed" not in caplog.text, caplog.text
