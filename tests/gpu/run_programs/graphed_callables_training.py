"""An untouched program: a timm ResNet-18 training step made into CUDA graphs with
``torch.cuda.make_graphed_callables``, then run for a number of steps.

    python graphed_callables_training.py [--steps 30]
"""

import argparse

import timm
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=30)
args = parser.parse_args()

torch.manual_seed(0)
model = timm.create_model("resnet18", pretrained=False, num_classes=10).cuda().train()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(8, 3, 64, 64, device="cuda", requires_grad=True)
target = torch.randint(0, 10, (8,), device="cuda")
graphed = torch.cuda.make_graphed_callables(model, (x,))
for _ in range(args.steps):
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(graphed(x), target)
    loss.backward()
    optimizer.step()
torch.cuda.synchronize()
print(f"loss {loss.item():.4f}")
