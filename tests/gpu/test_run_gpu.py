"""``cgfast run`` on a real GPU, over untouched programs (tests/gpu/run_programs: they
know nothing of cgfast): every graphed kernel of the traces annotated with a module of
the model, for an eager capture, ``make_graphed_callables`` (forward and backward) and
cudagraph trees; ``--profile`` from nothing to a summary; traces the program's own
profiler wrote elsewhere, paired by ``cgfast annotate OUT``; and no change to what
``torch.compile`` does (Dynamo's counters, the output).

``CGFAST_E2E_OUT``: the runs' directories are kept there.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import under_cgfast_run  # noqa: E402
from under_cgfast_run import cgfast, env, graphed_kernels  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "run_programs")


def workdir(tmp_path, name):
    return under_cgfast_run.workdir(tmp_path, "run", name)


def program(name, *args):
    return [sys.executable, os.path.join(PROGRAMS, name), *map(str, args)]


def llama_names():
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=2048,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    with torch.device("meta"):
        return {n for n, _ in transformers.LlamaForCausalLM(config).named_modules()}


def assert_all_annotated(trace, names, minimum, key="module"):
    """At least ``minimum`` graphed kernels, each carrying ``key``, modules of ``names``."""
    kernels = graphed_kernels(trace)
    assert len(kernels) >= minimum, len(kernels)
    return kernels, under_cgfast_run.assert_all_annotated(kernels, names, key)


def test_profile_from_nothing_to_a_summary(tmp_path):
    out = workdir(tmp_path, "profile")
    done = cgfast(
        "run",
        "--out",
        out,
        "--profile",
        "--replays",
        20,
        "--skip",
        5,
        "--",
        *program("eager_llama_replays.py"),
    )
    assert done.returncode == 0
    assert done.stdout == "replayed 40; logits (2, 32, 2048)\n"  # the program's stdout alone
    (trace,) = glob.glob(os.path.join(out, "000000.*.pt.trace.annotated.json.gz"))
    kernels, modules = assert_all_annotated(trace, llama_names(), 20 * 30)
    assert {"model.layers.0.mlp.down_proj", "model.layers.1.self_attn.o_proj", "lm_head"} <= modules
    replays = {e["args"].get("correlation") for e in kernels}
    assert len(replays) == 20
    assert "model.layers" in done.stderr and f"cgfast summary {out} --chart summary.html" in done.stderr


def test_traces_the_program_wrote_elsewhere_are_paired(tmp_path):
    out = workdir(tmp_path, "own-profiler")
    traces = os.path.join(workdir(tmp_path, "own-profiler-traces"), "")
    done = cgfast(
        "run",
        "--out",
        out,
        "--",
        *program("eager_llama_replays.py", "--replays", 10, "--profile-into", traces),
    )
    assert done.returncode == 0
    (annotations,) = glob.glob(os.path.join(out, "kernel_annotations_rank0_*.json"))
    with open(annotations) as f:
        (listed,) = json.load(f)["traces"]
    assert os.path.dirname(listed) == os.path.abspath(traces).rstrip("/") and "engine-worker" in listed
    done = cgfast("annotate", out)
    assert done.returncode == 0, done.stderr
    (annotated,) = glob.glob(os.path.join(traces, "engine-worker.*.annotated.json"))
    assert_all_annotated(annotated, llama_names(), 10 * 30)


def test_make_graphed_callables_forward_and_backward(tmp_path):
    timm = pytest.importorskip("timm")
    out = workdir(tmp_path, "graphed-callables")
    done = cgfast(
        "run",
        "--out",
        out,
        "--profile",
        "--replays",
        10,
        "--skip",
        10,
        "--",
        *program("graphed_callables_training.py"),
    )
    assert done.returncode == 0
    (trace,) = glob.glob(os.path.join(out, "*.annotated.json.gz"))
    with torch.device("meta"):
        names = {
            n for n, _ in timm.create_model("resnet18", pretrained=False, num_classes=10).named_modules()
        }
    kernels, modules = assert_all_annotated(trace, names, 10 * 50)
    backward = [e for e in kernels if e["args"].get("autograd_phase") == "backward"]
    assert len(backward) > len(kernels) / 3
    assert {"conv1", "layer4.1.conv2", "fc"} <= modules


def test_cudagraph_trees_and_no_change_to_what_torch_compile_does(tmp_path):
    out = workdir(tmp_path, "reduce-overhead")
    plain = subprocess.run(
        program("compiled_reduce_overhead.py"), capture_output=True, text=True, env=env(), timeout=600
    )
    assert plain.returncode == 0, plain.stderr[-3000:]
    done = cgfast(
        "run",
        "--out",
        out,
        "--profile",
        "--replays",
        10,
        "--skip",
        10,
        "--",
        *program("compiled_reduce_overhead.py"),
    )
    assert done.returncode == 0
    before, after = json.loads(plain.stdout.splitlines()[-1]), json.loads(done.stdout.splitlines()[-1])
    print("plain", before, "\nunder cgfast run", after)
    assert after["counters"] == before["counters"]  # no new graph breaks, graphs or recompiles
    assert after["checksum"] == pytest.approx(before["checksum"], rel=1e-6)
    (trace,) = glob.glob(os.path.join(out, "*.annotated.json.gz"))
    # the toggle's FX node names on every kernel, its module paths on those in a module
    _, modules = assert_all_annotated(trace, llama_names() | {""}, 10 * 10, key="name")
    assert any(m.startswith("model.layers.1") for m in modules)
