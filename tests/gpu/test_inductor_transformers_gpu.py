"""Inductor's brackets on a Hugging Face transformers model on a real GPU.

A 2-layer ``LlamaForCausalLM`` (random weights) runs under
``torch.compile(mode="reduce-overhead")`` with the toggle on, for inference and for a
training step. Every graphed kernel's recorded annotation must be the bracket around
its launch in the generated code (Triton kernels by name; GEMMs by their order in the
graph against their order in the code), every ``module`` one of the model's
``named_modules()``, and every GEMM's module an ``nn.Linear`` or a module holding none
(the rotary embedding multiplies its frequencies by the positions itself). The replays are then
profiled and annotated, and the share of GPU time left at root level (no module, the
root, or the ``model`` backbone) is reported (at most 10% in inference) (``CGFAST_E2E_OUT``: a JSON file per test).
"""

from __future__ import annotations

import collections
import gzip
import json
import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch import nn  # noqa: E402
from torch._inductor.utils import run_and_get_code  # noqa: E402

import cgfast.inductor  # noqa: E402,F401
from cgfast import capture  # noqa: E402
from cgfast.profiler import trace_handler  # noqa: E402
from test_inductor_gpu import GEMM_NAME, generated_brackets, kernel_kind  # noqa: E402

VOCAB, SEQ = 512, 32
ROOT_SHARE_LIMIT = 0.10


pytestmark = pytest.mark.usefixtures("isolated_inductor_cache", "inductor_annotations_on")


def llama():
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        use_cache=False,
    )
    return transformers.LlamaForCausalLM(cfg).cuda()


def check_recordings(model, codes) -> dict:
    """Every recorded annotation against the generated code; returns, per executable
    graph, (kernel name, annotation) of its kernel nodes in graph order."""
    annotations = dict(capture.get_kernel_annotations())
    topology = capture.get_graph_topology()
    assert annotations, "nothing was recorded"
    brackets = generated_brackets(codes)
    by_triton_kernel = collections.defaultdict(list)
    for annotation, kernels in brackets:
        for kernel in kernels:
            by_triton_kernel[kernel].append(annotation)
    extern = [annotation for annotation, kernels in brackets if not kernels]
    modules = dict(model.named_modules())
    report = {}
    for exec_id, graph in topology.items():
        labelled = []
        for node in (n for n in graph if n["type"] == "kernel"):
            recorded = annotations.get(node["id"])
            name = node["name"]
            if name.startswith("triton_"):
                assert recorded, f"Triton kernel {name} of graph {exec_id} has no annotation"
            if not recorded:
                labelled.append((name, None))
                continue
            (annotation,) = recorded
            labelled.append((name, annotation))
            for module in [annotation.get("module"), *annotation.get("modules", "").split(" + ")]:
                assert not module or module in modules, annotation
            if kernel_kind(name) == "triton":
                assert annotation in by_triton_kernel[name], (name, annotation)
                continue
            assert annotation in extern, (name, annotation)
            if kernel_kind(name) == "gemm" and "module" in annotation:
                # a Linear, or a module doing its own matmul (the rotary embedding's
                # inv_freq @ positions), never a container of Linears
                owner = modules[annotation["module"]]
                assert isinstance(owner, nn.Linear) or not any(
                    isinstance(m, nn.Linear) for m in owner.modules()
                ), (name, annotation)
        report[exec_id] = labelled
    return report


def gemms_in_graph_order(labelled) -> list:
    order = []
    for name, annotation in labelled:
        if annotation is None or kernel_kind(name) == "triton":
            continue
        if GEMM_NAME.search(annotation["name"]) and (not order or order[-1] != annotation):
            order.append(annotation)
    return order


def gemms_in_code_order(codes) -> list:
    return [a for a, kernels in generated_brackets(codes) if not kernels and GEMM_NAME.search(a["name"])]


def root_share_of_gpu_time(step, directory: str, backbone: str) -> dict:
    """Profile three replays, annotate the trace, and sum kernel time by module."""
    handler = trace_handler(directory)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities, on_trace_ready=handler):
        for _ in range(3):
            step()
        torch.cuda.synchronize()
    with gzip.open(handler.annotate_result["output"], "rt") as file:
        events = json.load(file)["traceEvents"]
    graphed = [e for e in events if e.get("cat") == "kernel" and "name" in e.get("args", {})]
    total = sum(e.get("dur", 0) for e in graphed)
    root = sum(e.get("dur", 0) for e in graphed if e["args"].get("module", "") in ("", backbone))
    return {
        "kernels": len(graphed),
        "gpu_us": total,
        "root_us": root,
        "root_share": root / total if total else None,
    }


def report(name: str, figures: dict) -> None:
    print("E2E", json.dumps({"test": name, **figures}))
    keep = os.environ.get("CGFAST_E2E_OUT")
    if keep:
        with open(os.path.join(keep, f"{name}.json"), "w") as file:
            json.dump(figures, file, indent=1)


def _run(model, step, name, tmp_path):
    def recorded_steps():
        for _ in range(3):  # warm-up, recording, replay
            step()

    _, codes = run_and_get_code(recorded_steps)
    torch.cuda.synchronize()
    graphs = check_recordings(model, codes)
    labelled = [pair for graph in graphs.values() for pair in graph]
    figures = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "graphed_kernels": len(labelled),
        "annotated": sum(a is not None for _, a in labelled),
        "root_level_kernels": sum(
            1 for _, a in labelled if a is not None and a.get("module", "") in ("", model.base_model_prefix)
        ),
    }
    directory = os.path.join(os.environ.get("CGFAST_E2E_OUT") or str(tmp_path), name)
    os.makedirs(directory, exist_ok=True)
    figures.update(root_share_of_gpu_time(step, directory, model.base_model_prefix))
    report(name, figures)
    assert figures["annotated"] > 0 and figures["kernels"] > 0
    return graphs, codes, figures


def test_llama_inference(tmp_path):
    model = llama().eval()
    compiled = torch.compile(model, mode="reduce-overhead")
    ids = torch.randint(0, VOCAB, (2, SEQ), device="cuda")

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            return compiled(input_ids=ids).logits

    graphs, codes, figures = _run(model, step, "inductor_llama_inference", tmp_path)
    # graph partitions are recorded in code order, each as an executable graph
    recorded = [g for g in graphs.values() if any(a for _, a in g)]
    assert [a for g in recorded for a in gemms_in_graph_order(g)] == gemms_in_code_order(codes)
    assert figures["root_share"] <= ROOT_SHARE_LIMIT, figures


def test_llama_training_step(tmp_path):
    model = llama().train()
    compiled = torch.compile(model, mode="reduce-overhead")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    ids = torch.randint(0, VOCAB, (2, SEQ), device="cuda")

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        optimizer.zero_grad(set_to_none=True)
        compiled(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()

    graphs, codes, _figures = _run(model, step, "inductor_llama_training", tmp_path)
    phases = {
        str({a.get("autograd_phase") for _, a in g if a}) for g in graphs.values() if any(a for _, a in g)
    }
    assert phases == {"{None}", "{'backward'}"}, phases
    forward = [g for g in graphs.values() if any(a and "autograd_phase" not in a for _, a in g)]
    forward_code = [c for c in codes if "tangents_" not in c]
    assert [a for g in forward for a in gemms_in_graph_order(g)] == gemms_in_code_order(forward_code)
    # the loss (cross entropy over the vocabulary) sits at root level: reported, not bounded
