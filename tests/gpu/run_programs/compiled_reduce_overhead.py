"""An untouched program: a small Hugging Face Llama under
``torch.compile(mode="reduce-overhead")`` (cudagraph trees), run for a number of steps;
prints Dynamo's counters and a checksum of the output as JSON on its last line.

    python compiled_reduce_overhead.py [--steps 30]
"""

import argparse
import json

import torch
import transformers
from torch._dynamo.utils import counters

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
args = parser.parse_args()

torch.manual_seed(0)
config = transformers.LlamaConfig(
    vocab_size=2048,
    hidden_size=256,
    intermediate_size=688,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    use_cache=False,
)
model = transformers.LlamaForCausalLM(config).cuda().eval()
compiled = torch.compile(model, mode="reduce-overhead")
ids = torch.randint(0, 2048, (2, 32), device="cuda")
with torch.no_grad():
    for _ in range(args.steps):
        logits = compiled(input_ids=ids).logits
torch.cuda.synchronize()
kept = ("stats", "graph_break", "frames", "recompiles")
print(
    json.dumps(
        {
            "counters": {k: dict(v) for k, v in sorted(counters.items()) if k in kept},
            "checksum": float(logits.double().sum()),
        }
    )
)
