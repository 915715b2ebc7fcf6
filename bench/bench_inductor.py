"""Cost of Inductor's launch brackets in eager (not captured) runs of compiled code.

    python bench/bench_inductor.py [--device cpu|cuda] [--layers 8] [--calls 300]

Compiles the same small MLP twice, with ``triton.cudagraph_kernel_annotations`` off
and on, times calls of both (interleaved, best of ``--repeat``) and prints them side
by side with the difference per bracket. Also times one bracket alone, written the way
the generated code writes it, with annotations disabled (every eager run) and enabled
outside a capture (warm-up runs under ``cgfast.capture.recording()``).
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from torch import nn
from torch._inductor import config
from torch._inductor.utils import run_and_get_code

import cgfast.inductor
from cgfast import capture

BRACKET = "_annotation_ctx.__enter__()"


def mlp(layers: int, width: int) -> nn.Module:
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*blocks)


def per_call_us(fn, x, calls: int, sync) -> float:
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn(x)
    sync()
    return (time.perf_counter() - start) / calls * 1e6


def per_bracket_us(repeat: int, calls: int) -> float:
    mark = capture.mark_kernels
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            _annotation_ctx = mark({"name": "relu_3", "module": "blocks.7", "component": "mlp"})
            _annotation_ctx.__enter__()
            _annotation_ctx.__exit__(None, None, None)
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()

    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    plain = mlp(args.layers, args.width).to(device)
    annotated = copy.deepcopy(plain)
    x = torch.randn(4, args.width, device=device)

    # Two functions, not two modules: Dynamo would let one module's compiled code
    # serve the other (it guards on their parameters, not on which module it is).
    def run_plain(inputs):
        return plain(inputs)

    def run_annotated(inputs):
        return annotated(inputs)

    with torch.no_grad():
        compiled_off = torch.compile(run_plain)
        _, plain_codes = run_and_get_code(compiled_off, x)
        with config.patch({cgfast.inductor.TOGGLE_KEY: True}):
            compiled_on = torch.compile(run_annotated)
            _, codes = run_and_get_code(compiled_on, x)  # resets Dynamo first
        compiled_off(x)  # so compile this one again, with the toggle off
        assert not any(BRACKET in code for code in plain_codes)
        brackets = sum(code.count(BRACKET) for code in codes)
        best = {"off": float("inf"), "on": float("inf")}
        for _ in range(args.repeat):
            for label, fn in (("off", compiled_off), ("on", compiled_on)):
                best[label] = min(best[label], per_call_us(fn, x, args.calls, sync))

    disabled = per_bracket_us(args.repeat, 20000)
    capture.enable_annotations()
    try:
        enabled = per_bracket_us(args.repeat, 20000)
    finally:
        capture.disable_annotations()

    delta = best["on"] - best["off"]
    print(f"torch {torch.__version__}, device {device}, cgfast.capture backend: {capture.backend()}")
    print(f"compiled MLP: {args.layers} x (Linear({args.width}, {args.width}) + ReLU), batch 4\n")
    print(f"{'':34s}{'toggle off':>12s}{'toggle on':>12s}{'difference':>12s}")
    print(f"{'one compiled call, µs':34s}{best['off']:12.2f}{best['on']:12.2f}{delta:12.2f}")
    print(f"{'brackets per call':34s}{0:12d}{brackets:12d}")
    print(f"{'per bracket, µs':34s}{'':12s}{'':12s}{delta / max(brackets, 1):12.2f}")
    print("\none bracket alone (assignment, __enter__, __exit__), µs:")
    print(f"  annotations disabled (eager runs):          {disabled:.3f}")
    print(f"  annotations enabled, not capturing:         {enabled:.3f}")


if __name__ == "__main__":
    main()
