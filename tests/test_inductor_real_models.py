"""Attribution on real models: Hugging Face transformers' Llama and GPT-2 (2 layers,
random weights from configs, nothing downloaded) compiled for the CPU with the toggle
on. Every ``module`` and ``modules`` name is one of the model's ``named_modules()``,
and at most 10% of the brackets sit at root level (no module, the root, or the
backbone holding every layer).

With ``CGFAST_MATRIX_OUT`` set, each model's figures are appended to that file as one
JSON line (``scripts/test-torch-matrix`` reads them).
"""

from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from torch._inductor import config  # noqa: E402
from torch._inductor.utils import fresh_cache, run_and_get_code  # noqa: E402

from cgfast.inductor import TOGGLE_KEY  # noqa: E402
from test_inductor_codegen import all_brackets  # noqa: E402

ROOT_SHARE_LIMIT = 0.10
VOCAB = 128


def _llama():
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return transformers.LlamaForCausalLM(cfg)


def _gpt2():
    cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64)
    return transformers.GPT2LMHeadModel(cfg)


MODELS = {"llama": _llama, "gpt2": _gpt2}


@pytest.fixture(scope="module", autouse=True)
def isolated_inductor_cache():
    with fresh_cache():
        yield
    torch._dynamo.reset()


def _compile(model, ids, training):
    torch._dynamo.reset()
    with config.patch({TOGGLE_KEY: True}):
        if training:

            def step(ids):
                model(input_ids=ids, labels=ids).loss.backward()

            _, codes = run_and_get_code(torch.compile(step), ids)
        else:
            with torch.no_grad():
                _, codes = run_and_get_code(torch.compile(model), ids)
    return all_brackets(codes)


@pytest.fixture(
    scope="module",
    params=[("llama", False), ("gpt2", False), ("llama", True)],
    ids=["llama", "gpt2", "llama-training"],
)
def compiled(request):
    name, training = request.param
    torch.manual_seed(0)
    model = MODELS[name]()
    model.train(training)
    ids = torch.randint(0, VOCAB, (1, 16))
    return name, training, model, _compile(model, ids, training)


def _figures(name, training, model, found):
    names = {n for n, _ in model.named_modules()}
    backbone = getattr(model, "base_model_prefix", "")
    root_level = [b for b in found if b.annotation.get("module", "") in ("", backbone)]
    given = [b.annotation["module"] for b in found if "module" in b.annotation]
    for b in found:
        if "modules" in b.annotation:
            given.extend(b.annotation["modules"].split(" + "))
    invalid = sorted({n for n in given if n not in names})
    return {
        "model": name + ("-training" if training else ""),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "brackets": len(found),
        "root_level": len(root_level),
        "invalid_names": invalid,
    }


def test_names_are_submodules_and_few_kernels_sit_at_root_level(compiled):
    name, training, model, found = compiled
    figures = _figures(name, training, model, found)
    out = os.environ.get("CGFAST_MATRIX_OUT")
    if out:
        with open(out, "a") as file:
            file.write(json.dumps(figures) + "\n")
    assert found
    assert figures["invalid_names"] == []
    assert figures["root_level"] <= ROOT_SHARE_LIMIT * figures["brackets"], figures
    # every projection's matmul is attributed to that very Linear (or Conv1D)
    leaves = {
        n for n, m in model.named_modules() if type(m).__name__ in ("Linear", "Conv1D") and n != "lm_head"
    }
    given = {b.annotation.get("module") for b in found}
    assert leaves <= given, sorted(leaves - given)
    if training:
        backward = [b for b in found if b.annotation.get("autograd_phase") == "backward"]
        assert backward and {b.annotation.get("module") for b in backward} & leaves
