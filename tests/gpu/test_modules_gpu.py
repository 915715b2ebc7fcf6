"""annotate_modules on a real GPU with timm models and a Hugging Face Llama, checked
against an independent reading of each capture graph: this file's own global module
hooks snapshot the capture graph's nodes (cuda-bindings) at every module's forward entry
and exit, the innermost module claims what appeared in between, and CUPTI (this file's
own ctypes binding) gives the ids. For a captured backward, this file hooks every
autograd node the forward made (which module made it is read from the Python frames of
the op that made it) and snapshots the graph at each node's start: what appears until
the next node starts is that node's module's backward.

Set ``CGFAST_E2E_OUT`` to a directory to keep the figures (counts, capture times)."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
import time

import pytest

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
pytest.importorskip("cuda.bindings.runtime")

from torch.nn.modules import module as nn_module  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

from cgfast import capture  # noqa: E402
from test_capture_gpu import ANNOTATABLE, MASK, Truth  # noqa: E402

FIGURES = {}


@pytest.fixture(scope="module")
def truth() -> Truth:
    return Truth()


pytestmark = pytest.mark.usefixtures("fresh_registry")


def write_figures():
    out = os.environ.get("CGFAST_E2E_OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "modules_gpu.json"), "w") as f:
            json.dump(FIGURES, f, indent=2, sort_keys=True)


class ForwardTruth:
    """Global module hooks (this file's): nodes a module's forward added, innermost."""

    def __init__(self, truth: Truth, model) -> None:
        self.truth = truth
        self.names = {m: n for n, m in model.named_modules()}
        self.open = []
        self.owner = {}  # node handle -> module name (innermost)
        self.hooks = []

    def __enter__(self):
        self.hooks = [
            nn_module.register_module_forward_pre_hook(self.pre),
            nn_module.register_module_forward_hook(self.post),
        ]
        return self

    def __exit__(self, *exc):
        for hook in self.hooks:
            hook.remove()

    def snapshot(self):
        return {int(node) for node in self.truth.nodes(self.truth.capture_graph())}

    def pre(self, module, args):
        if module in self.names and torch.cuda.is_current_stream_capturing():
            self.open.append((module, self.snapshot()))

    def post(self, module, args, output):
        if self.open and self.open[-1][0] is module:
            _, before = self.open.pop()
            for node in self.snapshot() - before:
                self.owner.setdefault(node, self.names[module])  # inner hooks ran first


def snapshot_nodes(truth: Truth, graph) -> dict:
    """node handle -> (type, CUPTI node id) of every node of a capture graph."""
    return {int(n): (truth.node_type(n), truth.node_id(n)) for n in truth.nodes(graph)}


def expected_keys(nodes: dict, exec_id: int, owner: dict, extra=None) -> dict:
    """exec key -> expected annotation for every annotatable node of a snapshot."""
    expected = {}
    for node, (node_type, node_id) in nodes.items():
        if node_type not in ANNOTATABLE:
            continue
        module = owner.get(node)
        expected[exec_id << 32 | (node_id & MASK)] = (
            None if module is None else {"module": module, **(extra or {})}
        )
    return expected


def spy_capture_end(monkeypatch, truth: Truth, before_end) -> list:
    """Patch CUDAGraph.capture_end (over cgfast's patch) to call ``before_end(graph
    object, capture graph)`` while the capture graph still exists."""
    capture.install()
    patched = torch.cuda.CUDAGraph.capture_end

    def capture_end_spy(self, *args, **kwargs):
        before_end(self, truth.capture_graph())
        return patched(self, *args, **kwargs)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", capture_end_spy)


def capture_with_snapshot(monkeypatch, truth: Truth, model, x, scopes) -> tuple:
    """Capture ``model(x)`` (no grad) into a new graph inside the context managers
    ``scopes()`` makes once capture_end is spied on; returns the graph and the snapshot
    (:func:`snapshot_nodes`) of its capture graph taken just before the capture ended."""
    g = torch.cuda.CUDAGraph()
    snapshots = []
    with monkeypatch.context() as patch:
        spy_capture_end(patch, truth, lambda _g, graph: snapshots.append(snapshot_nodes(truth, graph)))
        with contextlib.ExitStack() as stack:
            for scope in scopes():
                stack.enter_context(scope)
            with torch.no_grad(), torch.cuda.graph(g):
                model(x)
    return g, snapshots[0]


def recorded(keys) -> dict:
    registry = capture.get_kernel_annotations()
    return {key: (registry[key][0] if key in registry else None) for key in keys}


def capture_ms(model, x, annotate: bool) -> float:
    g = torch.cuda.CUDAGraph()
    handle = capture.annotate_modules(model) if annotate else None
    try:
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad(), torch.cuda.graph(g):
            model(x)
        torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e3
    finally:
        if handle is not None:
            handle.remove()
        capture.clear_kernel_annotations()


def warm_up(model, x):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(side)


def assert_every_kernel_gets_its_module(truth, monkeypatch, model, run, x, at_least: int) -> tuple:
    """Capture ``run(x)`` (``model``'s forward) with annotate_modules and the snapshot
    hooks; every annotatable node's annotation must be the snapshot's innermost module.
    Returns the expected and recorded annotation of every node."""
    warm_up(run, x)
    forward = ForwardTruth(truth, model)
    g, nodes = capture_with_snapshot(
        monkeypatch, truth, run, x, lambda: [capture.annotate_modules(model), forward]
    )
    expected = expected_keys(nodes, truth.exec_id(g), forward.owner)
    got = recorded(expected)
    assert sum(a is not None for a in expected.values()) > at_least
    wrong = {key: (got[key], want) for key, want in expected.items() if got[key] != want}
    assert not wrong, f"{len(wrong)} of {len(expected)} nodes differ, e.g. {list(wrong.values())[:5]}"
    assert set(capture.get_kernel_annotations()) == {k for k, a in expected.items() if a is not None}
    g.replay()
    torch.cuda.synchronize()
    return expected, got


@pytest.mark.parametrize("name", ["resnet50", "vit_small_patch16_224"])
def test_torch_cuda_graph_every_kernel_gets_its_module(truth, name, monkeypatch):
    model = timm.create_model(name, pretrained=False).eval().cuda()
    x = torch.randn(8, 3, 224, 224, device="cuda")
    expected, got = assert_every_kernel_gets_its_module(truth, monkeypatch, model, model, x, at_least=100)

    times = {"plain": [], "annotate_modules": []}
    for _ in range(10):
        times["plain"].append(capture_ms(model, x, False))
        times["annotate_modules"].append(capture_ms(model, x, True))
    medians = {k: statistics.median(v) for k, v in times.items()}
    FIGURES[f"{name}_forward"] = {
        "annotatable_nodes": len(expected),
        "annotated": sum(a is not None for a in got.values()),
        "matching_truth_percent": 100.0 * sum(got[k] == e for k, e in expected.items()) / len(expected),
        "capture_ms_median_of_10": medians,
        "ratio": medians["annotate_modules"] / medians["plain"],
        "backend": capture.backend(),
    }
    write_figures()


def tiny_llama():
    """A Hugging Face Llama of 2 layers (random weights, vocabulary 256) on the GPU."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(config).cuda()


def test_hugging_face_llama_every_kernel_gets_its_module(truth, monkeypatch):
    """A Hugging Face decoder (random weights) captured eagerly: decorated forwards, the
    attention function called with its module, rotary embeddings, cuBLAS and SDPA."""
    model = tiny_llama().eval()
    ids = torch.randint(0, 256, (2, 16), device="cuda")

    def step(ids):
        return model(input_ids=ids, use_cache=False).logits

    expected, got = assert_every_kernel_gets_its_module(truth, monkeypatch, model, step, ids, at_least=40)
    modules = {a["module"] for a in expected.values() if a}
    assert {"model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj", "lm_head"} <= modules
    FIGURES["llama_forward"] = {
        "annotatable_nodes": len(expected),
        "annotated": sum(a is not None for a in got.values()),
        "modules": len(modules),
    }
    write_figures()


class BackwardTruth(TorchFunctionMode):
    """During the forward capture: which module made each autograd node (the innermost
    module ``forward`` frame on the stack of the op that made it). During the backward
    capture: a snapshot of the graph at each autograd node's start."""

    def __init__(self, truth: Truth, model) -> None:
        super().__init__()
        self.truth = truth
        self.names = {id(m): n for n, m in model.named_modules()}
        self.made_by = {}
        self.starts = []  # (node handles at a node's start, its module or None)
        self.hooked = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        first = torch._C._autograd._get_sequence_nr()
        out = func(*args, **(kwargs or {}))
        if torch.cuda.is_current_stream_capturing():
            module = self.innermost_module()
            stack = [
                t.grad_fn
                for t in (out if isinstance(out, (tuple, list)) else [out])
                if isinstance(t, torch.Tensor) and t.grad_fn is not None
            ]
            while stack:
                node = stack.pop()
                if node in self.made_by or node._sequence_nr() < first:
                    continue
                self.made_by[node] = module
                stack.extend(p for p, _ in node.next_functions if p is not None)
        return out

    def innermost_module(self):
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code.co_name == "forward":
                name = self.names.get(id(frame.f_locals.get("self")))
                if name is not None:
                    return name
            frame = frame.f_back
        return None

    def hook_all(self, outputs):
        stack = [o.grad_fn for o in outputs if o.grad_fn is not None]
        while stack:
            node = stack.pop()
            if node in self.hooked:
                continue
            self.hooked.add(node)
            module = None if isinstance(node, torch._C._functions.AccumulateGrad) else self.made_by.get(node)
            node.register_prehook(lambda grads, module=module: self.note_start(module))
            stack.extend(p for p, _ in node.next_functions if p is not None)

    def note_start(self, module):
        if torch.cuda.is_current_stream_capturing():
            self.starts.append(({int(n) for n in self.truth.nodes(self.truth.capture_graph())}, module))


def test_make_graphed_callables_training_step(truth, monkeypatch):
    model = timm.create_model("resnet18", pretrained=False, num_classes=10).train().cuda()
    x = torch.randn(4, 3, 64, 64, device="cuda")
    graphs = []  # (graph object, node owners, extra keys, node snapshot)
    back = BackwardTruth(truth, model)
    forward = ForwardTruth(truth, model)

    def before_end(g, graph):
        nodes = snapshot_nodes(truth, graph)
        if not graphs:  # the forward graph
            back.__exit__(None, None, None)
            owners, extra = dict(forward.owner), None
        else:
            owners, extra = {}, {"autograd_phase": "backward"}
            marks = [*back.starts, (set(nodes), None)]
            for (before, module), (after, _) in zip(marks, marks[1:]):
                for node in after - before:
                    if module is not None:
                        owners[node] = module
        graphs.append((g, owners, extra, nodes))

    spy_capture_end(monkeypatch, truth, before_end)
    patched_capture_begin = torch.cuda.CUDAGraph.capture_begin

    def capture_begin_spy(self, *args, **kwargs):
        patched_capture_begin(self, *args, **kwargs)
        if not graphs:
            back.__enter__()

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_begin", capture_begin_spy)

    def root_output(module, args, output):
        if module is model and torch.cuda.is_current_stream_capturing():
            back.hook_all([output])

    hook = nn_module.register_module_forward_hook(root_output)
    try:
        with capture.annotate_modules(model), forward:
            graphed = torch.cuda.make_graphed_callables(model, (x,))
    finally:
        hook.remove()
    assert len(graphs) == 2
    figures = {}
    for (g, owners, extra, nodes), phase in zip(graphs, ("forward", "backward")):
        expected = expected_keys(nodes, truth.exec_id(g), owners, extra)
        got = recorded(expected)
        figures[phase] = {
            "annotatable_nodes": len(expected),
            "expected_annotated": sum(a is not None for a in expected.values()),
            "annotated": sum(a is not None for a in got.values()),
            "matching_truth_percent": 100.0
            * sum(got[k] == e for k, e in expected.items())
            / max(1, len(expected)),
        }
        FIGURES["resnet18_make_graphed_callables"] = figures
        write_figures()
        wrong = {key: (got[key], want) for key, want in expected.items() if got[key] != want}
        assert not wrong, (
            f"{phase}: {len(wrong)} of {len(expected)} nodes differ, e.g. {list(wrong.values())[:5]}"
        )
        assert figures[phase]["annotated"] == len(expected)  # every kernel of both graphs
    out = graphed(x)
    out.sum().backward()
    torch.cuda.synchronize()


def test_stacks_name_the_model_source_for_every_kernel(truth, monkeypatch):
    model = timm.create_model("resnet50", pretrained=False).eval().cuda()
    x = torch.randn(8, 3, 224, 224, device="cuda")
    warm_up(model, x)
    g, nodes = capture_with_snapshot(
        monkeypatch, truth, model, x, lambda: [capture.annotate_modules(model, stacks=True)]
    )
    exec_id = truth.exec_id(g)
    keys = {
        exec_id << 32 | (node_id & MASK) for node_type, node_id in nodes.values() if node_type in ANNOTATABLE
    }
    stacks = capture.get_kernel_stacks()
    sources = (os.path.dirname(timm.__file__), os.path.abspath(__file__))
    launches = {key: stacks.get(key, [None])[0] for key in keys}
    outside = {
        key: frame for key, frame in launches.items() if frame is None or not frame.startswith(sources)
    }
    assert not outside, f"{len(outside)} of {len(keys)} kernels, e.g. {list(outside.values())[:5]}"

    times = {"plain": [], "annotate_modules": [], "annotate_modules_stacks": []}
    for _ in range(7):
        times["plain"].append(capture_ms(model, x, False))
        times["annotate_modules"].append(capture_ms(model, x, True))
        handle = capture.annotate_modules(model, stacks=True)
        try:
            g2 = torch.cuda.CUDAGraph()
            torch.cuda.synchronize()
            start = time.perf_counter()
            with torch.no_grad(), torch.cuda.graph(g2):
                model(x)
            torch.cuda.synchronize()
            times["annotate_modules_stacks"].append((time.perf_counter() - start) * 1e3)
        finally:
            handle.remove()
            capture.clear_kernel_annotations()
    medians = {k: statistics.median(v) for k, v in times.items()}
    FIGURES["resnet50_stacks"] = {
        "kernels": len(keys),
        "with_launch_in_model_or_test": len(keys) - len(outside),
        "capture_ms_median_of_7": medians,
        "ratio_stacks": medians["annotate_modules_stacks"] / medians["plain"],
    }
    write_figures()
