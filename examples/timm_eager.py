"""An eager timm model captured in a CUDA graph: every kernel named after its module.

    python examples/timm_eager.py [OUT_DIR] [--model resnet50]

Random weights (nothing is downloaded). Writes the profiler trace, the annotations and
the annotated trace into OUT_DIR (default ``cgfast-timm``) and prints where the GPU
time of the replays goes, per module.
"""

import argparse

import timm
import torch

import cgfast
from cgfast import capture
from cgfast.profiler import trace_handler

parser = argparse.ArgumentParser()
parser.add_argument("out", nargs="?", default="cgfast-timm")
parser.add_argument("--model", default="resnet50")
args = parser.parse_args()

model = timm.create_model(args.model, pretrained=False).cuda().eval()
x = torch.randn(8, 3, 224, 224, device="cuda")

# warm up on a side stream, as torch.cuda.graph asks
side = torch.cuda.Stream()
side.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(side), torch.no_grad():
    for _ in range(3):
        model(x)
torch.cuda.current_stream().wait_stream(side)

graph = torch.cuda.CUDAGraph()
with capture.annotate_modules(model), torch.no_grad(), torch.cuda.graph(graph):
    y = model(x)

handler = trace_handler(args.out)
activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=activities, on_trace_ready=handler):
    for _ in range(5):
        graph.replay()
    torch.cuda.synchronize()

print("annotated trace:", handler.annotate_result["output"])
for row in cgfast.summarize(handler.annotate_result["output"], by="module", depth=2)[:10]:
    print(f"{row['share']:6.1%}  {row['attributed_us']:9.1f} us  {row['kernels']:5d} kernels  {row['value']}")
