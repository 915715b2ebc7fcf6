"""Every script in examples/ runs on a real GPU, as a user would run it, and its
annotated trace holds what it promises: every graphed kernel annotated, every module a
real name of the model, and a module summary printed.

``CGFAST_E2E_OUT``: the examples' output directories are kept there.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = {"kernel", "gpu_memcpy", "gpu_memset"}


def llama_module_names() -> set:
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=4096,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=256,
    )
    with torch.device("meta"):
        return {name for name, _ in transformers.LlamaForCausalLM(config).named_modules()}


def timm_module_names(name: str, **kwargs) -> set:
    timm = pytest.importorskip("timm")
    with torch.device("meta"):
        return {n for n, _ in timm.create_model(name, pretrained=False, **kwargs).named_modules()}


EXAMPLES = {
    "timm_eager": lambda: timm_module_names("resnet50"),
    "train_graphed_callables": lambda: timm_module_names("resnet18", num_classes=10),
    "hf_decode_compiled": llama_module_names,
    "serving_engine": llama_module_names,
}


def run_example(name: str, tmp_path) -> tuple:
    keep = os.environ.get("CGFAST_E2E_OUT")
    out = os.path.join(keep, "examples", name) if keep else str(tmp_path / name)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([os.path.join(ROOT, "python"), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", f"{name}.py"), out],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    print(done.stdout)
    assert done.returncode == 0, done.stderr[-4000:]
    (trace,) = glob.glob(os.path.join(out, "*.annotated.json.gz"))
    with gzip.open(trace, "rt") as file:
        events = json.load(file)["traceEvents"]
    return done.stdout, events


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_annotates_every_graphed_kernel(name, tmp_path):
    stdout, events = run_example(name, tmp_path)
    graphed = [e for e in events if e.get("cat") in WORK and e.get("args", {}).get("graph node id", 0) != 0]
    assert graphed, "no graphed work in the trace"
    kernels = [e for e in graphed if e["cat"] == "kernel"]
    unannotated = [e["name"] for e in kernels if not {"module", "name", "annotation"} & set(e["args"])]
    names = EXAMPLES[name]()
    modules = {e["args"]["module"] for e in graphed if "module" in e["args"]}
    print(
        "E2E",
        json.dumps(
            {
                "example": name,
                "graphed": len(graphed),
                "kernels": len(kernels),
                "unannotated_kernels": len(unannotated),
                "modules": len(modules),
            }
        ),
    )
    assert not unannotated, (
        f"{len(unannotated)} of {len(kernels)} graphed kernels unannotated: {unannotated[:5]}"
    )
    assert modules, "no kernel names a module"
    assert modules <= names, sorted(modules - names)[:10]
    # the module summary the example prints: "<share>%  <us> us  <n> kernels  <module path>",
    # paths rolled up to a depth, so each is a real module or a prefix of one
    printed = [line.split(" kernels", 1)[1].strip() for line in stdout.splitlines() if " kernels" in line]
    assert printed, stdout
    for value in printed:
        assert value in ("", "None") or any(m == value or m.startswith(value + ".") for m in names), value
