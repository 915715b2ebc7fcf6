"""The module of each kernel of real models, in launch order: what shapes the traces
``bench/bench_spans.py`` measures scope spans on.

    python bench/model_modules.py   # needs torch, timm and transformers; rewrites model_modules.json

Eager models (timm ResNet-50 and ViT-S, Hugging Face Llama, GPT-2 and BERT; random
weights, batch 1, on the CPU) are run once under a dispatch mode: every aten op that
launches a kernel (views and allocations launch none) takes the innermost module whose
``forward`` is running, as ``cgfast.capture.annotate_modules`` labels it
(tests/test_capture_modules.py checks ``annotate_modules`` against this reading). Compiled models are
the graphs of ``examples/`` (Inductor's kernels on the H200, labelled by cgfast's Inductor
toggle), nodes in graph order.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "model_modules.json"
NO_KERNEL = ("empty", "empty_strided", "lift_fresh", "detach", "alias", "_to_copy")


EAGER = ("resnet50", "vit_small", "llama", "gpt2", "bert")


def eager_model(name: str):
    """The model, with random weights, and an input for it."""
    import timm
    import torch
    import transformers

    small = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4}
    ids = torch.randint(0, 128, (1, 16), generator=torch.Generator().manual_seed(0))
    image = torch.zeros(1, 3, 32, 32)
    if name == "resnet50":
        return timm.create_model("resnet50"), image
    if name == "vit_small":
        return timm.create_model("vit_small_patch16_224", img_size=32), image
    if name == "llama":
        config = transformers.LlamaConfig(**small, num_attention_heads=4, num_key_value_heads=2)
        return transformers.LlamaForCausalLM(config), ids
    if name == "gpt2":
        config = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=4, n_head=4, n_positions=64)
        return transformers.GPT2LMHeadModel(config), ids
    if name == "bert":
        return transformers.BertModel(transformers.BertConfig(**small, num_attention_heads=4)), ids
    raise ValueError(f"no eager model {name!r}")


def innermost_forward(names: dict[int, str]) -> str | None:
    """The name (in ``names``, by ``id``) of the innermost module whose ``forward`` is
    running in the caller's stack, if any: what ``annotate_modules`` labels a launch with."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "forward":
            found = names.get(id(frame.f_locals.get("self")))
            if found is not None:
                return found
        frame = frame.f_back
    return None


def eager_sequence(name: str) -> dict:
    """The innermost module of each kernel the model launches in one forward."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    model, x = eager_model(name)
    names = {id(m): n for n, m in model.named_modules()}
    modules: list[str] = []

    class Launches(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not func.is_view and func.overloadpacket.__name__ not in NO_KERNEL:
                modules.append(innermost_forward(names) or "")
            return out

    with torch.no_grad(), Launches():
        model.eval()(x)
    return {"source": f"{type(model).__name__}, eager, annotate_modules", "modules": modules}


def compiled_sequences() -> dict[str, dict]:
    out = {}
    for example in ("h200-compiled-transformer", "h200-compiled-training"):
        (path,) = (ROOT / "examples" / example).glob("kernel_annotations_*.json")
        by_graph: dict[int, list[tuple[int, str]]] = {}
        for node, items in json.loads(path.read_text())["annotations"].items():
            module = next((i["module"] for i in items if isinstance(i, dict) and "module" in i), "")
            by_graph.setdefault(int(node) >> 32, []).append((int(node) & 0xFFFFFFFF, module))
        modules = [m for graph in sorted(by_graph) for _, m in sorted(by_graph[graph])]
        out[example.removeprefix("h200-")] = {"source": f"examples/{example}, Inductor", "modules": modules}
    return out


def load() -> dict[str, dict]:
    return json.loads(OUT.read_text())


def main() -> None:
    sequences = {**compiled_sequences(), **{name: eager_sequence(name) for name in EAGER}}
    OUT.write_text(json.dumps(sequences, indent=1) + "\n")
    for name, s in sequences.items():
        print(f"{name}: {len(s['modules'])} kernels")


if __name__ == "__main__":
    main()
