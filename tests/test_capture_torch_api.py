"""torch's own annotation API (torch.cuda.graph_annotations, torch >= 2.13) recorded by
cgfast where torch has no tools ids, on the fake driver."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
private = pytest.importorskip("torch.cuda._graph_annotations")
public = pytest.importorskip("torch.cuda.graph_annotations")

from cgfast import capture  # noqa: E402
from cgfast.capture._scopes import mark_kernels as cgfast_mark_kernels  # noqa: E402
from fake_graph_driver import FakeCUDAGraph, capturing  # noqa: E402

TORCH_MARK_KERNELS = private.mark_kernels
TORCH_SET_ENABLED = private._set_annotations_enabled


@pytest.fixture
def driver_without_tools_ids(fake, monkeypatch):
    monkeypatch.setattr(private, "_is_tools_id_unavailable", lambda: True)
    capture.install()
    yield fake
    capture.uninstall()


def annotated_capture(fake):
    """What torch.cuda.graph(g, enable_annotations=True) does around a capture."""
    g = FakeCUDAGraph(fake)
    private._set_annotations_enabled(True)
    try:
        with capturing(g):
            before = fake.launch("before")
            with public.mark_kernels("phase_A"):
                a = fake.launch("a")
            with private.mark_kernels({"name": "phase_B", "dtype": "bf16"}):
                b = fake.launch("b")
    finally:
        private._set_annotations_enabled(False)
    return g, before, a, b


def test_torch_scopes_are_recorded_by_cgfast_without_tools_ids(driver_without_tools_ids):
    fake = driver_without_tools_ids
    g, before, a, b = annotated_capture(fake)
    registry = capture.get_kernel_annotations()
    key = lambda node: g.graph_exec.id << 32 | node.local_id  # noqa: E731
    assert registry[key(a)] == [{"name": "phase_A"}]
    assert registry[key(b)] == [{"name": "phase_B", "dtype": "bf16"}]
    assert key(before) not in registry
    assert not capture.annotations_enabled()  # only for that capture
    assert capture.get_graph_topology()  # resolved and remapped like any capture


def test_torch_scopes_outside_an_annotated_capture_record_nothing(driver_without_tools_ids):
    fake = driver_without_tools_ids
    with capturing(FakeCUDAGraph(fake)), public.mark_kernels("phase_A"):
        fake.launch("a")
    assert len(capture.get_kernel_annotations()) == 0


def test_with_tools_ids_torch_records_and_cgfast_does_not(fake, monkeypatch):
    monkeypatch.setattr(private, "_is_tools_id_unavailable", lambda: False)
    capture.install()
    try:
        private._set_annotations_enabled(True)
        try:
            assert not capture.annotations_enabled()
            scope = public.mark_kernels("phase_A")
            assert not isinstance(scope, cgfast_mark_kernels)  # torch's own
        finally:
            private._set_annotations_enabled(False)
    finally:
        capture.uninstall()


def test_uninstall_gives_torch_its_functions_back(fake):
    capture.install()
    assert private.mark_kernels is not TORCH_MARK_KERNELS
    assert public.mark_kernels is private.mark_kernels
    capture.install()  # idempotent
    capture.uninstall()
    assert private.mark_kernels is TORCH_MARK_KERNELS and public.mark_kernels is TORCH_MARK_KERNELS
    assert private._set_annotations_enabled is TORCH_SET_ENABLED


def test_torch_mark_stream_is_recorded_through_its_mark_kernels(driver_without_tools_ids, monkeypatch):
    fake = driver_without_tools_ids
    # torch's mark_stream switches streams through torch.cuda: on the fake driver here
    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a, **k: fake.current())
    monkeypatch.setattr(torch.cuda, "stream", fake.use)
    side = fake.new_stream()
    g = FakeCUDAGraph(fake)
    private._set_annotations_enabled(True)
    try:
        with capturing(g) as main:
            fake.launch("main")
            with private.mark_stream(side, {"name": "prefetch"}):
                fake.wait_stream(side, main)
                load = fake.launch("load")
            fake.wait_stream(main, side)
            after = fake.launch("after")
    finally:
        private._set_annotations_enabled(False)
    registry = capture.get_kernel_annotations()
    assert registry[g.graph_exec.id << 32 | load.local_id] == [
        {"name": "prefetch", "stream": private._get_stream_id(side)}
    ]
    assert g.graph_exec.id << 32 | after.local_id not in registry
