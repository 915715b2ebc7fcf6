"""An untouched program (it knows nothing of cgfast): a small Hugging Face Llama with
random weights, captured into one CUDA graph and replayed. With ``--profile-into DIR``
it profiles its replays itself, with ``tensorboard_trace_handler`` and a worker name of
its own, as engines do.

    python eager_llama_replays.py [--replays 40] [--profile-into DIR]
"""

import argparse

import torch
import transformers

parser = argparse.ArgumentParser()
parser.add_argument("--replays", type=int, default=40)
parser.add_argument("--profile-into")
args = parser.parse_args()

torch.manual_seed(0)
config = transformers.LlamaConfig(
    vocab_size=2048,
    hidden_size=256,
    intermediate_size=688,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)
model = transformers.LlamaForCausalLM(config).cuda().eval()
ids = torch.randint(0, 2048, (2, 32), device="cuda")
stream = torch.cuda.Stream()
stream.wait_stream(torch.cuda.current_stream())
with torch.no_grad(), torch.cuda.stream(stream):
    for _ in range(2):
        model(input_ids=ids)
torch.cuda.current_stream().wait_stream(stream)
graph = torch.cuda.CUDAGraph()
with torch.no_grad(), torch.cuda.graph(graph):
    logits = model(input_ids=ids).logits


def replay(n):
    for _ in range(n):
        graph.replay()
    torch.cuda.synchronize()


if args.profile_into:
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    handler = torch.profiler.tensorboard_trace_handler(args.profile_into, worker_name="engine-worker")
    with torch.profiler.profile(activities=activities, on_trace_ready=handler):
        replay(args.replays)
else:
    replay(args.replays)
print(f"replayed {args.replays}; logits {tuple(logits.shape)}")
