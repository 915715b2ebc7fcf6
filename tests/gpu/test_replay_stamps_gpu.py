"""Every replay of every graph attributed exactly, on a real GPU (torch 2.11's profiler
writes no ``graph node id``): graphs whose kernels launch identically are told apart
by the ``cgfast.replay`` stamps of cgfast's patched ``CUDAGraph.replay``.

Two workloads, both with a Hugging Face ``LlamaForCausalLM`` (2 layers, random
weights): the model compiled with ``mode="reduce-overhead"`` and called with three
batch sizes in one step (cudagraph trees record a graph per path), and an eager
serving-style decoder step captured once per batch size 1..16 (batch 1 runs cuBLAS
gemv) under per-module scopes that name the batch size, replayed in a shuffled order.
Ground truth as in ``test_end_to_end_gpu``: capture-graph snapshots around each scope,
exec ids read from CUPTI. Pass: every graphed kernel of every replay carries its
scope's annotation, no replay is ambiguous, and every replay's kernel names met their
nodes' driver names exactly (no replay matched by base names only).

Figures (per test: replays, kernels, stamped/equivalent/ambiguous replays, and the
ambiguous replays that recovery by topology alone, ``--topology-only``, leaves) go to
``$CGFAST_E2E_OUT/<test>/figures.json``.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cuda.bindings.runtime")
transformers = pytest.importorskip("transformers")

from cgfast import capture  # noqa: E402
from test_end_to_end_gpu import (  # noqa: E402,F401  (fixtures)
    GroundTruth,
    clean_registry_fixture,
    inductor_truth_fixture,
    load,
    out_dir,
    profile_replays,
    run_compiled,
    truth_fixture,
    verify,
)


def llama():
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
    return transformers.LlamaForCausalLM(config).cuda().eval()


def cli(trace_path: str, output: str, *extra: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "cgfast", "annotate", trace_path, "-o", output, "--json", *extra],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def write_figures(directory: str, name: str, figures: dict, exact: dict, topology_only: dict) -> dict:
    line = {
        "test": name,
        **{k: v for k, v in figures.items() if k != "mismatches"},
        "mismatches": len(figures["mismatches"]),
        "recovery": exact["recovery"],
        "ambiguous_replays_by_topology_alone": topology_only["recovery"]["ambiguous_replays"],
        "unresolved_events_by_topology_alone": topology_only["recovery"]["unresolved_events"],
    }
    print("E2E", json.dumps(line))
    with open(os.path.join(directory, "figures.json"), "w") as f:
        json.dump({**line, "mismatch_details": figures["mismatches"][:20]}, f, indent=1, default=str)
    return line


def assert_exact(figures: dict, recovery: dict) -> None:
    assert figures["mismatches"] == [], figures["mismatches"][:5]
    assert recovery["ambiguous_replays"] == 0 and recovery["unresolved_events"] == 0, recovery
    assert recovery["recovered_replays"] == recovery["replays"] == figures["replays"], recovery
    assert recovery["base_name_replays"] == 0, recovery
    assert recovery["unknown_stamps"] == recovery["unfit_stamps"] == recovery["malformed_stamps"] == 0, (
        recovery
    )


def test_compiled_llama_called_with_several_shapes_per_step(inductor_truth, tmp_path):
    model = llama()
    compiled = torch.compile(model, mode="reduce-overhead", dynamic=False)
    inputs = {bs: torch.randint(0, 256, (bs, 8), device="cuda") for bs in (1, 2, 4)}

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            return [compiled(input_ids=ids, use_cache=False).logits.sum().item() for ids in inputs.values()]

    name = "compiled_llama_shapes"
    _annotated, figures = run_compiled(inductor_truth, tmp_path, name, step, steps=3)
    directory = out_dir(tmp_path, name)
    trace = next(
        os.path.join(directory, f)
        for f in sorted(os.listdir(directory))
        if f.endswith((".pt.trace.json", ".pt.trace.json.gz"))
    )
    exact = cli(trace, os.path.join(directory, "exact.annotated.json.gz"))
    alone = cli(trace, os.path.join(directory, "topology_only.annotated.json.gz"), "--topology-only")
    write_figures(directory, name, figures, exact, alone)
    assert_exact(figures, exact["recovery"])
    assert exact["recovery"]["stamped_replays"] == exact["recovery"]["replays"], exact["recovery"]


class ModuleScopes:
    """Around each hooked module's forward: a ground-truth snapshot and a cgfast scope,
    both naming the module and the batch size being captured."""

    def __init__(self, gt: GroundTruth, modules: dict) -> None:
        self.gt, self.batch, self.open = gt, None, []
        for name, module in modules.items():
            module.register_forward_pre_hook(lambda m, args, name=name: self.enter(name))
            module.register_forward_hook(lambda m, args, out: self.exit())

    def enter(self, name: str) -> None:
        annotation = {"name": name, "batch": str(self.batch)}
        snapshot, scope = self.gt.scope(annotation), capture.mark_kernels(dict(annotation))
        snapshot.__enter__()
        scope.__enter__()
        self.open.append((snapshot, scope))

    def exit(self) -> None:
        snapshot, scope = self.open.pop()
        scope.__exit__(None, None, None)
        snapshot.__exit__(None, None, None)


def serve(truth, tmp_path, name: str, batches: list, copies: int) -> dict:
    """Capture the decoder step ``copies`` times per batch size (each copy's scopes
    naming it), replay every graph twice in a shuffled order under the profiler, and
    check the annotated trace; returns the figures."""
    model = llama()
    gt = GroundTruth(truth)
    inner = model.model
    modules = {
        "embed_tokens": inner.embed_tokens,
        **{f"layers.{i}": layer for i, layer in enumerate(inner.layers)},
        "norm": inner.norm,
        "lm_head": model.lm_head,
    }
    scopes = ModuleScopes(gt, modules)
    inputs = {bs: torch.randint(0, 256, (bs, 1), device="cuda") for bs in batches}
    outputs, graphs = {}, {}

    def decode(bs: int):
        with torch.no_grad():
            return model(input_ids=inputs[bs], use_cache=False).logits

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for bs in batches:
            for _ in range(2):
                decode(bs)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    pool = None
    for bs in reversed(batches):  # largest first, sharing one memory pool as servers do
        for copy in range(copies):
            g = torch.cuda.CUDAGraph()
            scopes.batch = bs if copies == 1 else f"{bs} copy {copy}"
            first = len(gt.scopes)
            with capture.graph(g, pool=pool):
                outputs[bs, copy] = decode(bs)
            pool = g.pool()
            gt.instantiated(gt.scopes[first][0], g)
            graphs[bs, copy] = g
    torch.cuda.synchronize()

    order = [key for _ in range(2) for key in graphs]
    random.Random(0).shuffle(order)
    replays = iter(order)
    directory = out_dir(tmp_path, name)
    handler = profile_replays(lambda: graphs[next(replays)].replay(), len(order), directory)
    expected, launches = gt.expected()
    annotated = load(handler.annotate_result["output"])
    figures = verify(annotated, expected, launches)
    exact = cli(handler.trace_path, os.path.join(directory, "cli.annotated.json.gz"))
    assert load(exact["output"]) == annotated
    alone = cli(
        handler.trace_path, os.path.join(directory, "topology_only.annotated.json.gz"), "--topology-only"
    )
    line = write_figures(directory, name, figures, exact, alone)
    assert figures["replays"] == len(order) and figures["annotated"] > 0
    assert_exact(figures, exact["recovery"])
    assert exact["recovery"]["stamped_replays"] == len(order), exact["recovery"]
    batch_of = {
        e["args"].get("batch")
        for e in annotated["traceEvents"]
        if e.get("cat") == "kernel" and "batch" in e.get("args", {})
    }
    assert len(batch_of) == len(graphs), batch_of
    return line


def test_serving_style_graphs_for_batch_sizes_1_to_16_replayed_shuffled(truth, tmp_path):
    serve(truth, tmp_path, "serving_batch_1_to_16", list(range(1, 17)), copies=1)


def test_twin_graphs_per_batch_size_are_told_apart_by_their_stamps(truth, tmp_path):
    # two captures per batch size launch identically but carry different annotations:
    # recovery by topology alone must leave them ambiguous, the stamps decide
    line = serve(truth, tmp_path, "serving_twins_batch_1_to_4", [1, 2, 3, 4], copies=2)
    assert line["ambiguous_replays_by_topology_alone"] == line["replays"], line
