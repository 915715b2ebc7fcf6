"""Launch lines of backward kernels on a real GPU: a timm ResNet-18 and a Hugging Face
Llama training step captured whole (forward, loss, backward) under
``annotate_modules(model, stacks=True)``. The independent record is autograd's anomaly
mode: it keeps the forward traceback of every autograd node it makes; this file's
prehooks on every node snapshot the capture graph (cuda-bindings, CUPTI ids) when the
node starts, so the kernels that appear until the next node starts are that node's, and
their expected line is the innermost user frame of its traceback.

Set ``CGFAST_E2E_OUT`` to a directory to keep the figures (counts, capture times)."""

from __future__ import annotations

import json
import os
import statistics
import time

import pytest

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
pytest.importorskip("cuda.bindings.runtime")

from cgfast import capture  # noqa: E402
from test_backward_launch_lines import forward_line  # noqa: E402
from test_capture_gpu import ANNOTATABLE, MASK, Truth  # noqa: E402
from test_modules_gpu import snapshot_nodes, spy_capture_end, tiny_llama  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_registry")

FIGURES = {}


@pytest.fixture(scope="module")
def truth() -> Truth:
    return Truth()


def warm_up(step) -> None:
    """Two training steps on a side stream, as before a capture."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step()
    torch.cuda.current_stream().wait_stream(side)


class NodeStarts:
    """Prehooks on every autograd node that leads to ``output``: the capture graph's node
    handles when each starts, with the line anomaly mode kept for it."""

    def __init__(self, truth: Truth) -> None:
        self.truth = truth
        self.starts = []

    def hook_all(self, output) -> None:
        stack, seen = [output.grad_fn], set()
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            seen.add(node)
            line = forward_line(node)
            node.register_prehook(lambda grads, line=line: self.note(line))
            stack.extend(p for p, _ in node.next_functions if p is not None)

    def note(self, line) -> None:
        if torch.cuda.is_current_stream_capturing():
            self.starts.append(({int(n) for n in self.truth.nodes(self.truth.capture_graph())}, line))


def capture_step(truth, monkeypatch, model, loss_of, inputs):
    """Warm up, then capture forward + loss + backward into one graph under
    annotate_modules(stacks=True) and anomaly mode; returns exec key -> expected line of
    each backward kernel (``None``: anomaly mode kept none), and the capture's wall ms."""
    warm_up(lambda: loss_of(model, inputs).backward())
    starts = NodeStarts(truth)
    snapshots = []
    spy_capture_end(monkeypatch, truth, lambda _g, graph: snapshots.append(snapshot_nodes(truth, graph)))
    g = torch.cuda.CUDAGraph()
    with (
        capture.annotate_modules(model, stacks=True),
        torch.autograd.set_detect_anomaly(True, check_nan=False),
        torch.cuda.graph(g),
    ):
        loss = loss_of(model, inputs)
        starts.hook_all(loss)
        starts.note(None)  # the engine's first work (its seed gradient) is no node's
        loss.backward()
    exec_id = truth.exec_id(g)
    nodes = snapshots[0]
    marks = [*starts.starts, (set(nodes), None)]
    expected = {}
    for (before, line), (after, _) in zip(marks, marks[1:]):
        for handle in after - before:
            node_type, node_id = nodes[handle]
            if node_type in ANNOTATABLE:
                expected[exec_id << 32 | (node_id & MASK)] = line
    g.replay()
    torch.cuda.synchronize()
    return expected


def check(expected, name):
    stacks, phases = capture.get_kernel_stacks(), capture.get_kernel_launch_phases()
    with_line = {key: line for key, line in expected.items() if line is not None}
    wrong = {
        key: (stacks.get(key, [None])[0], phases.get(key), line)
        for key, line in with_line.items()
        if stacks.get(key, [None])[0] != line or phases.get(key) != "backward"
    }
    FIGURES[name] = {
        "backward_kernels": len(expected),
        "with_a_forward_line_in_anomaly_mode": len(with_line),
        "with_that_line_recorded": len(with_line) - len(wrong),
    }
    assert not wrong, f"{len(wrong)} of {len(with_line)} differ, e.g. {list(wrong.values())[:5]}"
    assert len(with_line) > 0.9 * len(expected)
    return with_line


def write_figures():
    out = os.environ.get("CGFAST_E2E_OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "backward_lines_gpu.json"), "w") as f:
            json.dump(FIGURES, f, indent=2, sort_keys=True)


def test_timm_resnet18_training_step(truth, monkeypatch):
    model = timm.create_model("resnet18", pretrained=False, num_classes=10).train().cuda()
    x = torch.randn(8, 3, 64, 64, device="cuda")
    expected = capture_step(truth, monkeypatch, model, lambda m, x: m(x).float().sum(), x)
    lines = check(expected, "resnet18_training_step")
    assert any("/timm/" in line for line in lines.values())
    write_figures()


def test_hugging_face_llama_training_step(truth, monkeypatch):
    model = tiny_llama().train()
    ids = torch.randint(0, 256, (2, 16), device="cuda")

    def loss_of(m, ids):
        return m(input_ids=ids, use_cache=False).logits.float().square().mean()

    expected = capture_step(truth, monkeypatch, model, loss_of, ids)
    lines = check(expected, "llama_training_step")
    assert any("/transformers/" in line for line in lines.values())
    write_figures()


def test_capture_cost_with_backward_lines():
    """Capture time of a ResNet-18 training step: plain, annotate_modules, and with
    stacks=True (launch lines, backward ones included); median of 11, interleaved."""
    model = timm.create_model("resnet18", pretrained=False, num_classes=10).train().cuda()
    x = torch.randn(8, 3, 64, 64, device="cuda")
    warm_up(lambda: model(x).sum().backward())
    ways = {
        "plain": lambda: None,
        "annotate_modules": lambda: capture.annotate_modules(model),
        "annotate_modules_stacks": lambda: capture.annotate_modules(model, stacks=True),
    }
    times = {way: [] for way in ways}
    for _ in range(11):
        for way, handle_of in ways.items():
            handle = handle_of()
            g = torch.cuda.CUDAGraph()
            torch.cuda.synchronize()
            start = time.perf_counter()
            with torch.cuda.graph(g):
                model(x).sum().backward()
            torch.cuda.synchronize()
            times[way].append((time.perf_counter() - start) * 1e3)
            if handle is not None:
                handle.remove()
            capture.clear_kernel_annotations()
    medians = {way: statistics.median(t) for way, t in times.items()}
    FIGURES["resnet18_training_step_capture_ms_median_of_11"] = {
        **medians,
        "ratio_modules": medians["annotate_modules"] / medians["plain"],
        "ratio_stacks": medians["annotate_modules_stacks"] / medians["plain"],
    }
    write_figures()
