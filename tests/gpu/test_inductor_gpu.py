"""Inductor's launch brackets recorded by cudagraph trees on a real GPU.

A small transformer runs under ``torch.compile(mode="reduce-overhead")`` with
``triton.cudagraph_kernel_annotations`` on. After the recordings every recorded key
must be a node of an executable graph, and each node's annotation must be the one the
generated code put around the launch that created it: Triton nodes are matched by
kernel name, GEMM and attention nodes by what they run and by their order in the graph.
"""

from __future__ import annotations

import ast
import re

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch._inductor import config  # noqa: E402
from torch._inductor.utils import run_and_get_code  # noqa: E402

import cgfast.inductor  # noqa: E402,F401
from cgfast import capture  # noqa: E402

DIM, HEADS, SEQ = 64, 2, 16
LINEARS = {"wq", "wk", "wv", "wo", "fc1", "fc2", "head"}
BRACKET = re.compile(
    r"^([ \t]*)_annotation_ctx = _mark_kernels\((\{.*\})\)\n"
    r"\1_annotation_ctx\.__enter__\(\)\n"
    r"((?:.*\n)*?)"
    r"\1_annotation_ctx\.__exit__\(None, None, None\)$",
    re.MULTILINE,
)
TRITON_LAUNCH = re.compile(r"\b(triton_\w+)\.run\(")
GEMM_NAME = re.compile(r"(^|\+ )(addmm|mm|bmm|baddbmm)\w*")


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(DIM, DIM) for _ in range(4))

    def forward(self, x):
        batch, seq, dim = x.shape

        def heads(t):
            return t.view(batch, seq, HEADS, dim // HEADS).transpose(1, 2)

        q, k, v = heads(self.wq(x)), heads(self.wk(x)), heads(self.wv(x))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, dim))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.attention = nn.LayerNorm(DIM), Attention()
        self.norm2, self.fc1, self.fc2 = nn.LayerNorm(DIM), nn.Linear(DIM, 4 * DIM), nn.Linear(4 * DIM, DIM)

    def forward(self, x):
        with torch.fx.traceback.annotate({"component": "attention"}):
            x = x + self.attention(self.norm1(x))
        with torch.fx.traceback.annotate({"component": "mlp"}):
            return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TinyTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.norm, self.head = nn.LayerNorm(DIM), nn.Linear(DIM, 16)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


pytestmark = pytest.mark.usefixtures("isolated_inductor_cache", "inductor_annotations_on")


@pytest.fixture
def model():
    torch.manual_seed(0)
    return TinyTransformer().cuda()


def generated_brackets(codes) -> list:
    """(annotation, launched Triton kernels) of every bracket, in code order."""
    found = []
    for code in codes:
        for match in BRACKET.finditer(code):
            body = match.group(3)
            assert "_annotation_ctx" not in body
            found.append((ast.literal_eval(match.group(2)), TRITON_LAUNCH.findall(body)))
    return found


def kernel_kind(name: str) -> str:
    """What a graph node's (mangled) kernel name says it runs. Attention kernels come
    first: the memory-efficient one is ``fmha_cutlassF...``."""
    lowered = name.lower()
    if name.startswith("triton_"):
        return "triton"
    if any(part in lowered for part in ("fmha", "flash", "attention")):
        return "attention"
    if any(part in lowered for part in ("gemm", "nvjet", "cutlass", "cublas")):
        return "gemm"
    return "other"


def check_recordings(model, codes) -> dict:
    """Check every recorded annotation against the generated code; returns the
    annotated kernel nodes per executable graph (for the report)."""
    annotations = dict(capture.get_kernel_annotations())
    topology = capture.get_graph_topology()
    nodes = {node["id"]: node for graph in topology.values() for node in graph}
    assert annotations, "nothing was recorded"
    assert set(annotations) <= set(nodes), "a key is not a node of an executable graph"

    brackets = generated_brackets(codes)
    by_triton_kernel: dict = {}
    for annotation, kernels in brackets:
        for kernel in kernels:
            by_triton_kernel.setdefault(kernel, []).append(annotation)
    extern = [annotation for annotation, kernels in brackets if not kernels]
    modules = dict(model.named_modules())

    report = {}
    for exec_id, graph in topology.items():
        kernels = [node for node in graph if node["type"] == "kernel"]
        labelled = []
        for node in kernels:
            recorded = annotations.get(node["id"])
            name = node["name"]
            if name.startswith("triton_"):
                assert recorded, f"Triton kernel {name} of graph {exec_id} has no annotation"
            if not recorded:
                labelled.append((name, None))
                continue
            (annotation,) = recorded
            labelled.append((name, annotation))
            if "module" in annotation:
                assert annotation["module"] in modules, annotation
            kind = kernel_kind(name)
            if kind == "triton":
                assert annotation in by_triton_kernel.get(name, []), (name, annotation)
                continue
            assert annotation in extern, (name, annotation)
            if kind == "gemm":
                assert GEMM_NAME.search(annotation["name"]), (name, annotation)
                if "module" in annotation:
                    assert annotation["module"].split(".")[-1] in LINEARS, (name, annotation)
            if kind == "attention":
                assert "scaled_dot_product" in annotation["name"], (name, annotation)
                assert annotation.get("module", "").endswith("attention"), (name, annotation)
        report[exec_id] = labelled
    return report


def gemm_modules_in_graph_order(labelled) -> list:
    """Modules of the GEMM brackets in the order their nodes are in the graph (one
    bracket's nodes are consecutive: a GEMM may launch more than one kernel)."""
    order = []
    for name, annotation in labelled:
        if annotation is None or kernel_kind(name) == "triton":
            continue
        if GEMM_NAME.search(annotation["name"]) and (not order or order[-1] != annotation):
            order.append(annotation)
    return [a.get("module") for a in order]


def gemm_modules_in_code_order(codes) -> list:
    return [
        annotation.get("module")
        for annotation, kernels in generated_brackets(codes)
        if not kernels and GEMM_NAME.search(annotation["name"])
    ]


def print_report(title, report) -> None:
    print(f"\n== {title}")
    for exec_id, labelled in report.items():
        annotated = sum(a is not None for _, a in labelled)
        print(f"exec graph {exec_id}: {annotated}/{len(labelled)} kernel nodes annotated")
        for name, annotation in labelled:
            print(f"    {name[:60]:60s} {annotation}")


def test_inference_recordings_of_two_shapes(model):
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
    small = torch.randn(2, SEQ, DIM, device="cuda")
    large = torch.randn(4, SEQ, DIM, device="cuda")

    def run():
        with torch.no_grad():
            compiled(small)  # warm-up: not captured
            after_warm_up = dict(capture.get_kernel_annotations())
            compiled(small)  # recording
            first = dict(capture.get_kernel_annotations())
            for _ in range(3):  # a second shape: warm-up, recording, replay
                compiled(large)
            expected = model(small)
            torch.testing.assert_close(compiled(small), expected, rtol=1e-3, atol=1e-3)
        return after_warm_up, first

    (after_warm_up, first), codes = run_and_get_code(run)
    torch.cuda.synchronize()
    assert after_warm_up == {}
    assert first
    now = capture.get_kernel_annotations()
    assert all(now.get(key) == value for key, value in first.items()), "a recording was cleared"
    report = check_recordings(model, codes)
    print_report("inference, two shapes", report)
    annotated_graphs = [g for g, labelled in report.items() if any(a for _, a in labelled)]
    assert len(annotated_graphs) == 2
    expected_order = gemm_modules_in_code_order(codes[:1])
    assert sorted(expected_order) == sorted(
        [f"layers.{i}.attention.w{p}" for i in range(2) for p in "qkvo"]
        + [f"layers.{i}.fc{j}" for i in range(2) for j in (1, 2)]
        + ["head"]
    )
    for exec_id in annotated_graphs:
        assert gemm_modules_in_graph_order(report[exec_id]) == expected_order


def test_training_step_records_forward_and_backward(model):
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(2, SEQ, DIM, device="cuda")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def train():
        recorded = []
        for _ in range(3):  # warm-up, recording, replay
            torch.compiler.cudagraph_mark_step_begin()
            optimizer.zero_grad(set_to_none=True)
            compiled(x).square().mean().backward()
            optimizer.step()
            recorded.append(len(capture.get_kernel_annotations()))
        return recorded

    recorded, codes = run_and_get_code(train)
    torch.cuda.synchronize()
    assert recorded[0] == 0 and recorded[1] > 0 and recorded[2] == recorded[1]
    report = check_recordings(model, codes)
    print_report("training step", report)
    phases = {}
    for exec_id, labelled in report.items():
        seen = {a.get("autograd_phase") for _, a in labelled if a}
        if seen:
            assert len(seen) == 1, f"graph {exec_id} mixes phases: {seen}"
            phases[exec_id] = seen.pop()
    assert sorted(map(str, phases.values())) == ["None", "backward"]
    forward = next(g for g, phase in phases.items() if phase is None)
    forward_code = [c for c in codes if "tangents_" not in c]
    assert gemm_modules_in_graph_order(report[forward]) == gemm_modules_in_code_order(forward_code)


def test_capture_without_cudagraph_trees(model):
    x = torch.randn(2, SEQ, DIM, device="cuda")
    with config.patch({"triton.cudagraph_trees": False}):
        compiled = torch.compile(model, mode="reduce-overhead")

        def run():
            with torch.no_grad():
                for _ in range(2):
                    compiled(x)

        _, codes = run_and_get_code(run)
    torch.cuda.synchronize()
    report = check_recordings(model, codes)
    print_report("cudagraph_trees=False", report)
    (exec_id,) = [g for g, labelled in report.items() if any(a for _, a in labelled)]
    assert gemm_modules_in_graph_order(report[exec_id]) == gemm_modules_in_code_order(codes)
