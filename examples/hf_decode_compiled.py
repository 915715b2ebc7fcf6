"""A Hugging Face decoder compiled with ``torch.compile(mode="reduce-overhead")``,
stepping a fixed-shape decode loop; cgfast's Inductor toggle names every kernel of the
replayed CUDA graphs after its FX nodes and module.

    python examples/hf_decode_compiled.py [OUT_DIR]

A 2-layer Llama with random weights from a config (nothing is downloaded) decodes
greedily one token at a time into a static KV cache, so every step has the same shapes
and replays the same graph. Writes trace, annotations and annotated trace into OUT_DIR
(default ``cgfast-decode``) and prints the GPU time per module.

(``model.generate()`` with a static cache under ``reduce-overhead`` crashed inside
torch's cudagraph trees on torch 2.11 with transformers 5.17, with or without cgfast;
this example writes the decode loop out instead.)
"""

import argparse

import torch
import transformers

import cgfast
import cgfast.inductor  # registers the toggle
from cgfast.profiler import trace_handler

parser = argparse.ArgumentParser()
parser.add_argument("out", nargs="?", default="cgfast-decode")
args = parser.parse_args()

torch.manual_seed(0)
config = transformers.LlamaConfig(
    vocab_size=4096,
    hidden_size=512,
    intermediate_size=1408,
    num_hidden_layers=2,
    num_attention_heads=8,
    num_key_value_heads=4,
    max_position_embeddings=256,
)
model = transformers.LlamaForCausalLM(config).cuda().eval()
batch, prompt, new_tokens = 4, 16, 32
cache = transformers.StaticCache(config=config, max_cache_len=prompt + new_tokens)

torch._inductor.config.triton.cudagraph_kernel_annotations = True
decode = torch.compile(model, mode="reduce-overhead")


@torch.no_grad()
def generate(ids):
    cache.reset()
    out = model(input_ids=ids, past_key_values=cache, cache_position=torch.arange(prompt, device="cuda"))
    token = out.logits[:, -1:].argmax(-1)
    for pos in range(prompt, prompt + new_tokens - 1):
        torch.compiler.cudagraph_mark_step_begin()
        logits = decode(
            input_ids=token, past_key_values=cache, cache_position=torch.tensor([pos], device="cuda")
        ).logits
        token = logits[:, -1:].argmax(-1).clone()
    return token


ids = torch.randint(0, config.vocab_size, (batch, prompt), device="cuda")
for _ in range(2):  # compile, record the graphs
    generate(ids)
handler = trace_handler(args.out)
activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=activities, on_trace_ready=handler):
    generate(ids)
    torch.cuda.synchronize()

trace = handler.annotate_result["output"]
print("annotated trace:", trace)
for row in cgfast.summarize(trace, by="module", depth=4)[:10]:
    print(f"{row['share']:6.1%}  {row['attributed_us']:9.1f} us  {row['kernels']:5d} kernels  {row['value']}")
