"""The engine-style programs of examples/engines (they know nothing of cgfast), each run
under ``cgfast run`` untouched on a real GPU, then ``cgfast annotate OUT``: every graphed
kernel of every process annotated with a module of its model (and, for compiled pieces,
its FX nodes), each trace paired with its own process's file; batch sizes told apart;
summaries per rank and pooled, and ``diff --per-rank`` on two torchrun runs; on two GPUs,
NCCL kernels captured inside the graph named after the module that issued the
all-reduce, checked against the order the program itself recorded.

``CGFAST_E2E_OUT``: the runs' directories are kept there.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import under_cgfast_run  # noqa: E402
from under_cgfast_run import ROOT, assert_all_annotated, cgfast, graphed_kernels  # noqa: E402

ENGINES = os.path.join(ROOT, "examples", "engines")


def workdir(tmp_path, name):
    return under_cgfast_run.workdir(tmp_path, "engines", name)


def engine(name, *args):
    return [sys.executable, os.path.join(ENGINES, f"{name}.py"), *map(str, args)]


def torchrun(nprocs, name, *args):
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nprocs),
        *engine(name, *args)[1:],
    ]


def module_names(name, *args):
    """The module paths of the model the engine builds, from its own ``build_model``."""
    spec = importlib.util.spec_from_file_location(f"engine_{name}", os.path.join(ENGINES, f"{name}.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with torch.device("meta"):
        model = module.build_model(*args, torch.device("meta"))
    return {n for n, _ in model.named_modules()}


def annotated_traces(traces, count):
    found = sorted(glob.glob(os.path.join(traces, "*.annotated.json*")))
    assert len(found) == count, found
    return found


def listed_traces(out):
    """Each annotation file in ``out``: the traces it lists (its process's)."""
    listed = {}
    for path in glob.glob(os.path.join(out, "kernel_annotations_rank*_*.json")):
        with open(path) as f:
            listed[os.path.basename(path)] = json.load(f).get("traces", [])
    return listed


def test_vllm_style_piecewise_engine(tmp_path):
    out, traces = workdir(tmp_path, "vllm-run"), workdir(tmp_path, "vllm-traces")
    done = cgfast(
        "run", "--out", out, "--", *engine("vllm_style", "--trace-dir", traces, "--batch-sizes", "1,2,4")
    )
    assert done.returncode == 0
    assert done.stdout.startswith("done ")
    (listed,) = listed_traces(out).values()  # the worker's; the parent captured nothing
    assert len(listed) == 1 and os.path.basename(listed[0]).startswith("worker0.")
    assert cgfast("annotate", out).returncode == 0
    (trace,) = annotated_traces(traces, 1)
    kernels = graphed_kernels(trace)
    names = module_names("vllm_style") | {""}
    modules = assert_all_annotated(kernels, names, key="name")  # the FX nodes of every kernel
    assert any(".layers.1." in m for m in modules)
    assert sum("module" in e["args"] for e in kernels) > 0.9 * len(kernels)
    graphs = {e["args"]["graph node id"] >> 32 for e in kernels}
    # one graph per compiled piece per batch size, each told apart by its own graph id
    assert len(graphs) >= 2 * 3, graphs


@pytest.mark.parametrize("start", ["spawn", "subprocess"])
def test_sglang_style_schedulers(tmp_path, start):
    out, traces = workdir(tmp_path, f"sglang-{start}-run"), workdir(tmp_path, f"sglang-{start}-traces")
    done = cgfast(
        "run",
        "--out",
        out,
        "--",
        *engine("sglang_style", "--trace-dir", traces, "--schedulers", 2, "--start", start),
    )
    assert done.returncode == 0
    listed = listed_traces(out)
    assert len(listed) == 2 and all(len(t) == 1 for t in listed.values())  # a file per scheduler
    assert cgfast("annotate", out).returncode == 0
    names = module_names("sglang_style")
    for trace in annotated_traces(traces, 2):
        kernels = graphed_kernels(trace)
        assert_all_annotated(kernels, names)
        graphs = {e["args"]["graph node id"] >> 32 for e in kernels}
        assert len(graphs) >= 2, graphs  # several batch sizes replayed, each its own graph


def torchrun_hf(tmp_path, name, *args):
    out, traces = workdir(tmp_path, f"{name}-run"), workdir(tmp_path, f"{name}-traces")
    done = cgfast("run", "--out", out, "--", *torchrun(2, "torchrun_hf", "--trace-dir", traces, *args))
    assert done.returncode == 0
    listed = listed_traces(out)
    assert len(listed) == 2
    for file, traces_of_file in listed.items():
        rank = file.split("_rank")[1].split("_")[0]
        (trace,) = traces_of_file
        assert os.path.basename(trace).startswith(f"rank{rank}.")  # each rank's own trace
    assert cgfast("annotate", out).returncode == 0
    return traces


def test_torchrun_two_ranks_on_one_gpu_summary_and_diff(tmp_path):
    base = torchrun_hf(tmp_path, "torchrun-base")
    wide = torchrun_hf(tmp_path, "torchrun-wide", "--wider-mlp-layer", 1)
    names = module_names("torchrun_hf", _Args())
    for trace in annotated_traces(base, 2):
        assert_all_annotated(graphed_kernels(trace), names)
    for pattern in ("rank0.*.annotated.json*", "rank1.*.annotated.json*", "*.annotated.json*"):
        done = cgfast("summary", os.path.join(base, pattern), "--by", "module", "--format", "json")
        assert done.returncode == 0
        report = json.loads(done.stdout)
        assert any(row["value"].startswith("model.layers.1.mlp") for row in report["rows"])
    done = cgfast("diff", base, wide, "--per-rank", "--by", "module", "--format", "json", "--all")
    assert done.returncode == 0
    report = json.loads(done.stdout)
    slower = {row["value"] for row in report["rows"] if row["verdict"] == "slower"}
    assert "model.layers.1.mlp.down_proj" in slower
    assert not {v for v in slower if v.startswith("model.layers.0.")}


class _Args:
    """The defaults torchrun_hf's ``build_model`` reads."""

    layers = 2
    wider_mlp_layer = None
    seed = 0
    seq_len = 128


two_gpus = pytest.mark.skipif(
    torch.cuda.device_count() < 2,
    reason="needs 2 GPUs: with world size 1 NCCL launches no kernel for an all-reduce",
)


@two_gpus
@pytest.mark.parametrize("launcher", ["torchrun", "spawn"])
def test_tensor_parallel_all_reduce_inside_the_graph(tmp_path, launcher):
    out, traces = workdir(tmp_path, f"tp-{launcher}-run"), workdir(tmp_path, f"tp-{launcher}-traces")
    if launcher == "torchrun":
        command = torchrun(2, "tensor_parallel", "--trace-dir", traces)
    else:
        command = engine("tensor_parallel", "--launcher", "spawn", "--nprocs", 2, "--trace-dir", traces)
    done = cgfast("run", "--out", out, "--", *command)
    assert done.returncode == 0
    assert cgfast("annotate", out).returncode == 0
    for rank in (0, 1):
        (trace,) = glob.glob(os.path.join(traces, f"rank{rank}.*.annotated.json*"))
        with open(os.path.join(traces, f"truth_rank{rank}.json")) as f:
            truth = json.load(f)["all_reduce_modules"]
        kernels = sorted(graphed_kernels(trace), key=lambda e: e["ts"])
        nccl = [e for e in kernels if "nccl" in e["name"].lower()]
        replays = {}
        for e in nccl:
            replays.setdefault(e["args"]["correlation"], []).append(e["args"].get("module"))
        assert replays
        for modules in replays.values():
            assert modules == truth  # the k-th all-reduce kernel of a replay: the k-th call's module
        assert all("module" in e["args"] for e in kernels)
