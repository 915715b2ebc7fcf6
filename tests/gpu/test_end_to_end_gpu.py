"""The whole path a user runs, on a real GPU: capture with cgfast scopes (or the
Inductor toggle), replay under ``torch.profiler`` with ``cgfast.profiler.trace_handler``,
then the ``cgfast`` CLI. torch 2.11's profiler writes no ``graph node id``, so this is
where node-id recovery is proven.

Ground truth is independent of cgfast's own bookkeeping: snapshots of the capture graph
before and after each scope (read with cuda-bindings, ids with this file's own CUPTI
binding), and the exec id of each graph read from CUPTI when torch instantiates it.
Pass means: every kernel of every replay in the annotated trace carries the annotation
of the scope that created its node, and no other, and its launch (grid, block) is the
one recorded for that node.

Set ``CGFAST_E2E_OUT`` to a directory to keep the traces, annotations and figures.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cuda.bindings.runtime")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from cgfast import capture  # noqa: E402
from cgfast.profiler import trace_handler  # noqa: E402
from test_capture_gpu import Truth  # noqa: E402

MASK = 0xFFFFFFFF
WORK = {"kernel", "gpu_memcpy", "gpu_memset"}
# What Kineto writes into a kernel's args; anything else on an annotated event came
# from an annotation.
PROFILER_ARGS = {
    "External id",
    "queued",
    "device",
    "context",
    "stream",
    "correlation",
    "registers per thread",
    "shared memory",
    "blocks per SM",
    "warps per SM",
    "grid",
    "block",
    "est. achieved occupancy %",
    "graph node id",
    "bytes",
    "memory bandwidth (GB/s)",
    "cbid",
}


class GroundTruth:
    """Which annotation each node of each executable graph must carry, and its launch."""

    def __init__(self, truth: Truth) -> None:
        self.truth = truth
        self.scopes: list = []  # (capture graph id, {capture node id: kind}, annotation)
        self.launches: dict = {}  # capture node id -> (grid, block) of kernels
        self.exec_of: dict = {}  # capture graph id -> exec graph id

    def _kernels(self) -> dict:
        graph = self.truth.capture_graph()
        found = {}
        for node in self.truth.nodes(graph):
            kind = self.truth.node_type(node)
            if kind in KINDS:
                node_id = self.truth.node_id(node)
                found[node_id] = KINDS[kind]
                if KINDS[kind] == "kernel" and node_id not in self.launches:
                    _name, grid, block = self.truth.kernel_launch(node)
                    self.launches[node_id] = (grid, block)
        return found

    def scope(self, annotation: dict):
        """A context that records the nodes created inside it (only while capturing)."""
        outer = self

        class Snapshot:
            def __enter__(self):
                self.active = torch.cuda.is_current_stream_capturing()
                if self.active:
                    self.graph_id = outer.truth.graph_id(outer.truth.capture_graph())
                    self.before = outer._kernels()
                return self

            def __exit__(self, *exc):
                if self.active:
                    after = outer._kernels()
                    new = {n: k for n, k in after.items() if n not in self.before}
                    outer.scopes.append((self.graph_id, new, dict(annotation)))
                return False

        return Snapshot()

    def instantiated(self, capture_graph_id: int, cuda_graph) -> None:
        self.exec_of[capture_graph_id] = self.truth.exec_id(cuda_graph)

    def expected(self) -> tuple:
        """(exec node id -> annotation, exec node id -> (grid, block)); inner scopes
        are recorded first and win, as they do in cgfast."""
        annotation, launch = {}, {}
        for graph_id, nodes, ann in self.scopes:
            exec_id = self.exec_of[graph_id]
            for node_id in nodes:
                key = exec_id << 32 | (node_id & MASK)
                merged = annotation.setdefault(key, {})
                for k, v in ann.items():
                    merged.setdefault(k, v)
        for node_id, value in self.launches.items():
            graph_id = node_id >> 32
            if graph_id in self.exec_of:
                launch[self.exec_of[graph_id] << 32 | (node_id & MASK)] = value
        return annotation, launch


KINDS: dict = {}


# The fixtures are named apart from their functions so that test_replay_stamps_gpu can
# import them without its test arguments shadowing the imports.
@pytest.fixture(scope="module", name="truth")
def truth_fixture():
    import cuda.bindings.driver as drv

    t = drv.CUgraphNodeType
    KINDS.update(
        {
            t.CU_GRAPH_NODE_TYPE_KERNEL: "kernel",
            t.CU_GRAPH_NODE_TYPE_MEMCPY: "memcpy",
            t.CU_GRAPH_NODE_TYPE_MEMSET: "memset",
        }
    )
    return Truth()


@pytest.fixture(autouse=True, name="clean_registry")
def clean_registry_fixture():
    capture.clear_kernel_annotations()
    yield
    capture.clear_kernel_annotations()


def out_dir(tmp_path, name: str) -> str:
    keep = os.environ.get("CGFAST_E2E_OUT")
    path = os.path.join(keep, name) if keep else str(tmp_path / name)
    os.makedirs(path, exist_ok=True)
    return path


def load(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def verify(annotated: dict, expected: dict, launches: dict) -> dict:
    """Check every kernel of every replay; returns the figures."""
    events = annotated["traceEvents"]
    launches_corr = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") == "cuda_runtime" and e.get("name", "").startswith("cudaGraphLaunch")
    }
    replays: dict = {}
    for e in events:
        if e.get("cat") in WORK and e.get("args", {}).get("correlation") in launches_corr:
            replays.setdefault(e["args"]["correlation"], []).append(e)
    figures = {"replays": len(replays), "kernels": 0, "recovered": 0, "annotated": 0, "mismatches": []}
    for correlation, replay in replays.items():
        seen = set()
        for e in replay:
            figures["kernels"] += 1
            node = e["args"].get("graph node id")
            if not node:
                figures["mismatches"].append(("no node id", correlation, e["name"][:60]))
                continue
            figures["recovered"] += 1
            seen.add(node)
            want = {k: v for k, v in expected.get(node, {}).items() if k != "stream"}
            got = {k: v for k, v in e["args"].items() if k not in PROFILER_ARGS}
            # the lane a moved event ran on (--lanes all; checked in tests/test_trace_lanes.py)
            if (
                "original_stream" in got
                and isinstance(got["original_stream"], int)
                and got["original_stream"] != e["tid"]
            ):
                del got["original_stream"]
            if got != {k: str(v) for k, v in want.items()}:
                figures["mismatches"].append(("annotation", correlation, e["name"][:60], got, want))
            if want:
                figures["annotated"] += 1
            if e.get("cat") == "kernel" and node in launches:
                grid, block = launches[node]
                if e["args"].get("grid") != list(grid) or e["args"].get("block") != list(block):
                    figures["mismatches"].append(
                        ("launch", correlation, e["name"][:60], e["args"].get("grid"), grid)
                    )
        if len(seen) != len(replay):
            figures["mismatches"].append(("node matched twice", correlation))
    return figures


def profile_replays(run, steps: int, directory: str):
    handler = trace_handler(directory)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities, on_trace_ready=handler):
        for _ in range(steps):
            run()
        torch.cuda.synchronize()
    return handler


def cli_annotate(trace_path: str, output: str) -> dict:
    """The console script, with annotation auto-discovery."""
    done = subprocess.run(
        [sys.executable, "-m", "cgfast", "annotate", trace_path, "-o", output, "--json"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def report(name: str, directory: str, figures: dict, cli: dict) -> None:
    line = {
        "test": name,
        **{k: v for k, v in figures.items() if k != "mismatches"},
        "mismatches": len(figures["mismatches"]),
        "recovery": cli["recovery"],
    }
    print("E2E", json.dumps(line))
    with open(os.path.join(directory, "figures.json"), "w") as f:
        json.dump({**line, "mismatch_details": figures["mismatches"][:20]}, f, indent=1, default=str)


def test_eager_two_stream_graph(truth, tmp_path):
    torch.manual_seed(0)
    dim = 256
    norm = nn.LayerNorm(dim).cuda()
    wq, wk, wv = (nn.Linear(dim, dim).cuda() for _ in range(3))
    fc1, fc2 = nn.Linear(dim, 4 * dim).cuda(), nn.Linear(4 * dim, dim).cuda()
    x = torch.randn(8, 64, dim, device="cuda")
    side = torch.cuda.Stream()
    gt = GroundTruth(truth)

    def attention(h):
        q, k, v = wq(h), wk(h), wv(h)
        return torch.softmax(q @ k.transpose(1, 2) / dim**0.5, dim=-1) @ v

    def forward():
        main = torch.cuda.current_stream()
        with gt.scope({"name": "layer_norm"}), capture.mark_kernels("layer_norm"):
            h = norm(x)
        side.wait_stream(main)
        with (
            gt.scope({"name": "attention", "stream": capture.lane_for(side)}),
            capture.mark_stream(side, "attention"),
        ):
            a = attention(h)
        with gt.scope({"name": "mlp"}), capture.mark_kernels({"name": "mlp"}):
            m = fc2(F.gelu(fc1(h)))
        main.wait_stream(side)
        with gt.scope({"name": "residual"}), capture.mark_kernels("residual"):
            return x + a + m

    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            forward()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    g = torch.cuda.CUDAGraph()
    with capture.graph(g):
        forward()
    gt.instantiated(gt.scopes[0][0], g)
    assert capture.lane_for(side) >= 60

    directory = out_dir(tmp_path, "eager_two_stream")
    handler = profile_replays(g.replay, 4, directory)
    expected, launches = gt.expected()
    annotated = load(handler.annotate_result["output"])
    figures = verify(annotated, expected, launches)
    cli = cli_annotate(handler.trace_path, os.path.join(directory, "cli.annotated.json.gz"))
    assert load(cli["output"]) == annotated
    report("eager_two_stream", directory, figures, cli)
    assert figures["replays"] == 4 and figures["kernels"] > 4 * 8
    assert figures["mismatches"] == [], figures["mismatches"][:5]
    assert cli["recovery"]["recovered_replays"] == 4 and cli["recovery"]["unresolved_events"] == 0
    lanes = {
        e["tid"]
        for e in annotated["traceEvents"]
        if e.get("args", {}).get("name") == "attention" and e.get("cat") == "kernel"
    }
    assert lanes == {capture.lane_for(side)}


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, 4, batch_first=True)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        with torch.fx.traceback.annotate({"component": "attention"}):
            h = self.norm1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
        with torch.fx.traceback.annotate({"component": "mlp"}):
            return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class SmallTransformer(nn.Module):
    def __init__(self, dim: int = 64) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Block(dim), Block(dim)])
        self.head = nn.Linear(dim, 32)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


@pytest.fixture(name="inductor_truth")
def inductor_truth_fixture(truth, monkeypatch):
    """Ground truth for compiled code: every launch bracket of the generated code is
    also snapshotted, and every instantiation's exec id is read from CUPTI."""
    from torch._inductor import config
    from torch._inductor.utils import fresh_cache

    import cgfast.inductor  # noqa: F401

    gt = GroundTruth(truth)
    real_mark_kernels = capture.mark_kernels

    class Bracket:
        def __init__(self, annotation):
            self.inner = real_mark_kernels(annotation)
            self.snapshot = gt.scope(annotation if isinstance(annotation, dict) else {"name": annotation})

        def __enter__(self):
            self.snapshot.__enter__()
            return self.inner.__enter__()

        def __exit__(self, *exc):
            self.inner.__exit__(*exc)
            return self.snapshot.__exit__(*exc)

    monkeypatch.setattr(capture, "mark_kernels", Bracket)
    capture.install()
    real_capture_end = torch.cuda.CUDAGraph.capture_end

    def capture_end(self, *args, **kwargs):
        graph_id = truth.graph_id(truth.capture_graph())
        result = real_capture_end(self, *args, **kwargs)
        gt.instantiated(graph_id, self)
        return result

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", capture_end)
    torch._dynamo.reset()
    with fresh_cache(), config.patch({"triton.cudagraph_kernel_annotations": True}):
        yield gt
    torch._dynamo.reset()


def run_compiled(gt, tmp_path, name: str, step, steps: int = 3):
    for _ in range(3):  # warm-up, recording, first replay
        step()
    torch.cuda.synchronize()
    assert gt.scopes, "no launch bracket ran during a capture"
    directory = out_dir(tmp_path, name)
    handler = profile_replays(step, steps, directory)
    expected, launches = gt.expected()
    annotated = load(handler.annotate_result["output"])
    figures = verify(annotated, expected, launches)
    cli = cli_annotate(handler.trace_path, os.path.join(directory, "cli.annotated.json.gz"))
    assert load(cli["output"]) == annotated
    report(name, directory, figures, cli)
    assert figures["replays"] >= steps and figures["annotated"] > 0
    assert figures["mismatches"] == [], figures["mismatches"][:5]
    recovery = cli["recovery"]
    assert recovery["recovered_replays"] == recovery["replays"] >= steps, recovery
    assert recovery["unresolved_events"] == 0, recovery
    return annotated, figures


def test_compiled_inference(inductor_truth, tmp_path):
    torch.manual_seed(0)
    model = SmallTransformer().cuda().eval()
    compiled = torch.compile(model, mode="reduce-overhead")
    x = torch.randn(4, 32, 64, device="cuda")

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            return compiled(x)

    annotated, _ = run_compiled(inductor_truth, tmp_path, "compiled_inference", step)
    modules = {e["args"].get("module") for e in annotated["traceEvents"] if e.get("cat") == "kernel"}
    assert any(m and m.startswith("layers.0.") for m in modules), modules


def test_compiled_training_step(inductor_truth, tmp_path):
    torch.manual_seed(0)
    model = SmallTransformer().cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4, 32, 64, device="cuda")

    @torch.compile(mode="reduce-overhead")
    def forward_backward(inp):
        loss = model(inp).square().mean()
        loss.backward()
        return loss

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        loss = forward_backward(x)
        opt.step()
        return loss

    annotated, _ = run_compiled(inductor_truth, tmp_path, "compiled_training", step)
    phases = {e["args"].get("autograd_phase") for e in annotated["traceEvents"] if e.get("cat") == "kernel"}
    assert "backward" in phases
