"""A program run plainly and under ``cgfast run`` by tests/test_run.py: compiles a small
Hugging Face Llama (random weights) with Inductor on the CPU, twice over two input shapes,
and prints JSON with Dynamo's counters, the code Inductor generated and the output.

    python compile_and_report.py
"""

import json

import torch
import transformers
from torch._dynamo.utils import counters
from torch._inductor.utils import run_and_get_code

torch.manual_seed(0)
config = transformers.LlamaConfig(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    use_cache=False,
)
model = transformers.LlamaForCausalLM(config).eval()
compiled = torch.compile(model)
codes, outputs = [], []
with torch.no_grad():
    for length in (8, 12):
        ids = torch.arange(length).reshape(1, length) % 128
        logits, code = run_and_get_code(lambda ids=ids: compiled(input_ids=ids).logits)
        codes += code
        outputs.append(logits.sum().item())
kept = ("stats", "graph_break", "frames", "recompiles")
print(
    json.dumps(
        {
            "counters": {k: dict(v) for k, v in sorted(counters.items()) if k in kept},
            "codes": codes,
            "outputs": outputs,
        }
    )
)
