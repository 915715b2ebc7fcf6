"""A training step through ``torch.cuda.make_graphed_callables``: forward and backward
kernels named after their module (backward ones with ``autograd_phase``).

    python examples/train_graphed_callables.py [OUT_DIR]

A timm ResNet-18 with random weights; writes trace, annotations and annotated trace
into OUT_DIR (default ``cgfast-training``) and prints the GPU time per module and phase.
"""

import argparse

import timm
import torch

import cgfast
from cgfast import capture
from cgfast.profiler import trace_handler

parser = argparse.ArgumentParser()
parser.add_argument("out", nargs="?", default="cgfast-training")
args = parser.parse_args()

model = timm.create_model("resnet18", pretrained=False, num_classes=10).cuda().train()
x = torch.randn(16, 3, 128, 128, device="cuda")
target = torch.randint(0, 10, (16,), device="cuda")
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

with capture.annotate_modules(model):  # backward=True by default
    graphed = torch.cuda.make_graphed_callables(model, (x,))


def step():
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(graphed(x), target)
    loss.backward()
    optimizer.step()


for _ in range(3):
    step()
handler = trace_handler(args.out)
activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
with torch.profiler.profile(activities=activities, on_trace_ready=handler):
    for _ in range(5):
        step()
    torch.cuda.synchronize()

trace = handler.annotate_result["output"]
print("annotated trace:", trace)
for row in cgfast.summarize(trace, by="autograd_phase"):
    print(f"{row['share']:6.1%}  {row['attributed_us']:9.1f} us  phase {row['value'] or 'forward'}")
for row in cgfast.summarize(trace, by="module", depth=1)[:8]:
    print(f"{row['share']:6.1%}  {row['attributed_us']:9.1f} us  {row['kernels']:5d} kernels  {row['value']}")
