"""Launch lines of backward kernels, on the fake driver with real models on the CPU: each
node a backward pass captures gets the line of the forward op whose gradient it computes
(``launch_phase: backward``), checked against autograd's anomaly mode, which keeps the
forward traceback of every node it makes."""

from __future__ import annotations

import json
import os
import re

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

import cgfast  # noqa: E402
from cgfast import capture  # noqa: E402
from cgfast.capture._runtime import runtime  # noqa: E402
from fake_graph_driver import FakeCUDAGraph, capturing  # noqa: E402
from test_capture_modules import hf_models  # noqa: E402
from trace_files import cgfast as run_cgfast  # noqa: E402
from trace_files import kernel, read_json, write_trace  # noqa: E402

TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
CGFAST_DIR = os.path.dirname(cgfast.__file__) + os.sep
FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')


def forward_line(node):
    """The innermost user frame of the forward traceback anomaly mode kept for ``node``
    (``None`` where it kept none, or only torch's frames)."""
    for entry in reversed(node.metadata.get("traceback_") or ()):
        match = FRAME.search(entry)
        if match and not match["file"].startswith((TORCH_DIR, CGFAST_DIR, "<")):
            return f"{match['file']}:{match['line']}:{match['function']}"
    return None


class LaunchEachOp(TorchDispatchMode):
    """Every aten op launches a fake kernel named after it; remembers, for each node
    launched in a backward pass, the forward line anomaly mode kept for the autograd
    node that ran it."""

    def __init__(self, driver):
        super().__init__()
        self.driver = driver
        self.forward = []  # fake nodes launched outside a backward pass
        self.backward = {}  # fake node -> its autograd node's forward line (None: none)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        node = self.driver.launch(str(func))
        if node is not None:
            running = torch._C._current_autograd_node()
            if running is None:
                self.forward.append(node)
            else:
                self.backward[node] = forward_line(running)
        return out


def capture_training_step(fake, model, step, handle):
    """Capture ``step()`` (forward and backward) with every op a fake kernel, under
    ``handle`` and anomaly mode; the launcher runs under the stack recorder."""
    launcher = LaunchEachOp(fake)
    g = FakeCUDAGraph(fake)
    with handle, torch.autograd.set_detect_anomaly(True, check_nan=False), launcher, capturing(g):
        step()
    return g, launcher


def node_id(g, node):
    return g.graph_exec.id << 32 | node.local_id


def check_backward_lines(g, launcher, forward_graph=None):
    """Every backward node (of ``g``) whose autograd node anomaly mode gave a line has
    exactly that line, as a backward launch; the others have none; no forward node (of
    ``forward_graph``, else ``g``) has a phase. Returns how many have a line."""
    stacks, phases = capture.get_kernel_stacks(), capture.get_kernel_launch_phases()
    with_line = 0
    for node, expected in launcher.backward.items():
        key = node_id(g, node)
        if expected is None:
            assert key not in stacks, (node.launch.name, stacks.get(key))
            continue
        with_line += 1
        assert stacks[key][0] == expected, node.launch.name
        assert phases[key] == "backward"
    for node in launcher.forward:
        assert node_id(forward_graph or g, node) not in phases
    return with_line


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.up(x))  # LINE-UP
        return self.down(h) * 2  # LINE-DOWN


def line_of(marker):
    import inspect

    source, first = inspect.getsourcelines(TwoLayers.forward)
    return first + next(i for i, text in enumerate(source) if marker in text)


def test_each_backward_node_gets_its_forward_ops_line(fake):
    model = TwoLayers()
    x = torch.randn(3, 8)
    g, launcher = capture_training_step(
        fake, model, lambda: model(x).sum().backward(), capture.annotate_modules(model, stacks=True)
    )
    assert check_backward_lines(g, launcher) >= 6
    lines = {capture.get_kernel_stacks()[node_id(g, n)][0] for n, line in launcher.backward.items() if line}
    here = os.path.abspath(__file__)
    # gelu's, mul's and the linears' gradients (nn.Linear's F.linear is torch's:
    # filtered), and the loss's sum's
    assert {line for line in lines if line.endswith(":forward")} == {
        f"{here}:{line_of(marker)}:forward" for marker in ("LINE-UP", "LINE-DOWN")
    }
    assert all(line.startswith(here) for line in lines)
    # forward nodes keep their own lines, with no phase
    assert all(node_id(g, n) in capture.get_kernel_stacks() for n in launcher.forward)
    assert runtime.forward_stacks == {}  # forgotten once no stacks are asked for


def test_without_stacks_nothing_is_recorded(fake):
    model = TwoLayers()
    x = torch.randn(3, 8)
    capture_training_step(fake, model, lambda: model(x).sum().backward(), capture.annotate_modules(model))
    assert capture.get_kernel_stacks() == {} and capture.get_kernel_launch_phases() == {}


def test_a_timm_resnet_training_step(fake):
    timm = pytest.importorskip("timm")
    model = timm.create_model("resnet18", pretrained=False)
    x = torch.randn(2, 3, 32, 32)
    g, launcher = capture_training_step(
        fake, model, lambda: model(x).sum().backward(), capture.annotate_modules(model, stacks=True)
    )
    assert check_backward_lines(g, launcher) > 60
    lines = {capture.get_kernel_stacks()[node_id(g, n)][0] for n, line in launcher.backward.items() if line}
    assert any("/timm/" in line for line in lines)


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_a_hugging_face_training_step(fake, name):
    model = hf_models()[name].train()
    ids = torch.randint(0, 128, (1, 8))
    g, launcher = capture_training_step(
        fake,
        model,
        lambda: last_output(model(ids)).float().sum().backward(),
        capture.annotate_all_modules(stacks=True),
    )
    assert check_backward_lines(g, launcher) > 40
    lines = {capture.get_kernel_stacks()[node_id(g, n)][0] for n, line in launcher.backward.items() if line}
    assert any("/transformers/" in line for line in lines)


def last_output(out):
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def test_graphed_callables_backward_is_a_separate_capture(fake):
    """As make_graphed_callables does: the forward captured, then its backward captured
    into another graph; the backward graph's nodes get the forward graph's lines."""
    model = TwoLayers()
    x = torch.randn(3, 8)
    launcher = LaunchEachOp(fake)
    forward_graph, backward_graph = FakeCUDAGraph(fake), FakeCUDAGraph(fake)
    with capture.recording(stacks=True), torch.autograd.set_detect_anomaly(True, check_nan=False), launcher:
        with capturing(forward_graph):
            out = model(x)
        with capturing(backward_graph):
            torch.autograd.grad(out.sum(), list(model.parameters()))
    assert check_backward_lines(backward_graph, launcher, forward_graph) >= 6


def test_saved_and_annotated_and_summarised_by_line_and_phase(fake, tmp_path):
    model = TwoLayers()
    x = torch.randn(3, 8)
    g, launcher = capture_training_step(
        fake, model, lambda: model(x).sum().backward(), capture.annotate_modules(model, stacks=True)
    )
    path = tmp_path / "annotations.json"
    capture.save_annotations(path)
    document = json.loads(path.read_text())
    assert {int(k): v for k, v in document["launch_phases"].items()} == capture.get_kernel_launch_phases()
    down = (
        f"{os.path.abspath(__file__)}:{line_of('LINE-DOWN')}:forward"  # a mul: forward and backward kernels
    )
    events, t = [], 100.0
    for node in [*launcher.forward, *launcher.backward]:
        events.append(kernel(t, 1.0, node=node_id(g, node), name=node.launch.name))
        t += 2.0
    trace = write_trace(tmp_path / "trace.json", events)
    out = tmp_path / "out.json"
    cgfast.annotate_file(trace, annotations=str(path), output=str(out))
    kernels = [e["args"] for e in read_json(out)["traceEvents"] if e.get("cat") == "kernel"]
    backward = [a for a in kernels if a.get("launch_phase") == "backward"]
    annotated = capture.get_kernel_annotations()  # launch lines go on annotated kernels
    lined = [n for n, line in launcher.backward.items() if line and node_id(g, n) in annotated]
    assert len(backward) == len(lined) > 10
    assert all("launch_phase" not in a for a in kernels[: len(launcher.forward)])
    summary = run_cgfast("summary", str(out), "--by", "launch", "--format", "json")
    assert summary.returncode == 0, summary.stderr
    values = {row["value"] for row in json.loads(summary.stdout)["rows"]}
    assert f"{down} [backward]" in values
    assert down in values  # the same line's forward kernels, on a row of their own
