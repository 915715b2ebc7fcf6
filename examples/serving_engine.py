"""A serving-style engine, as vLLM and SGLang are built: the model is compiled without
CUDA graphs, and the engine captures one graph per batch size itself. cgfast records
the Inductor brackets of every capture (``capture.recording()``), so each replayed
kernel says which FX nodes and module it computes.

    python examples/serving_engine.py [OUT_DIR]

A 2-layer Llama with random weights; writes trace, annotations and annotated trace into
OUT_DIR (default ``cgfast-serving``) and prints the GPU time per module.
"""

import argparse

import torch
import transformers

import cgfast
import cgfast.inductor  # registers the toggle
from cgfast import capture
from cgfast.profiler import trace_handler

parser = argparse.ArgumentParser()
parser.add_argument("out", nargs="?", default="cgfast-serving")
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
    use_cache=False,
)
model = transformers.LlamaForCausalLM(config).cuda().eval()
torch._inductor.config.triton.cudagraph_kernel_annotations = True
forward = torch.compile(model, dynamic=False)  # the default mode captures no graphs


class Engine:
    """One CUDA graph per batch size, over static input and output buffers."""

    def __init__(self, batch_sizes, seq):
        self.graphs = {}
        for batch in batch_sizes:
            ids = torch.zeros(batch, seq, dtype=torch.long, device="cuda")
            with torch.no_grad():
                for _ in range(2):  # compile and warm up outside the capture
                    forward(input_ids=ids)
                graph = torch.cuda.CUDAGraph()
                with capture.recording(), torch.cuda.graph(graph):
                    logits = forward(input_ids=ids).logits
            self.graphs[batch] = (graph, ids, logits)

    def step(self, ids):
        graph, static_ids, logits = self.graphs[ids.shape[0]]
        static_ids.copy_(ids)
        graph.replay()
        return logits[:, -1].argmax(-1)


engine = Engine(batch_sizes=(1, 2, 4, 8), seq=64)
handler = trace_handler(args.out)
activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=activities, on_trace_ready=handler):
    for batch in (1, 8, 4, 2, 8):
        engine.step(torch.randint(0, config.vocab_size, (batch, 64), device="cuda"))
    torch.cuda.synchronize()

trace = handler.annotate_result["output"]
print("annotated trace:", trace)
for row in cgfast.summarize(trace, by="module", depth=4)[:10]:
    print(f"{row['share']:6.1%}  {row['attributed_us']:9.1f} us  {row['kernels']:5d} kernels  {row['value']}")
