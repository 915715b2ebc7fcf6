"""Cost of cgfast.capture scopes.

    python bench/bench_capture.py [--json out.json]

Always: a scope's enter+exit while annotations are disabled, and while enabled but not
capturing, without and with ``install()``'s patches (which count captures in progress,
so the driver need not be asked), the way Inductor's generated code opens them (a new
object per launch, ``__enter__``/``__exit__`` by hand). On a machine without a GPU the
enabled figures are the no-backend path.
With a GPU also: the added cost of a scope during capture (1 and 8 kernels per scope,
relative to the same capture without scopes) and of resolving, recording the topology
and remapping at capture end, per graph node.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from cgfast import capture


def per_scope_us(repeat: int) -> float:
    mark = capture.mark_kernels
    annotation = {"name": "triton_poi_fused_add_0", "kernel_name": "triton_poi_fused_add_0"}
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeat):
            ctx = mark(annotation)
            ctx.__enter__()
            ctx.__exit__(None, None, None)
        best = min(best, time.perf_counter() - start)
    return best / repeat * 1e6


def capture_seconds(torch, ops: int, ops_per_scope: int, scoped: bool, recording: bool) -> float:
    """Wall time of capturing ``ops`` small kernels (and ending the capture)."""
    x = torch.zeros(1024, device="cuda")
    g = torch.cuda.CUDAGraph()
    context = capture.graph(g) if recording else torch.cuda.graph(g)
    torch.cuda.synchronize()
    start = time.perf_counter()
    with context:
        for i in range(0, ops, ops_per_scope):
            if scoped:
                ctx = capture.mark_kernels({"name": "op", "index": i})
                ctx.__enter__()
            for _ in range(ops_per_scope):
                x.add_(1)
            if scoped:
                ctx.__exit__(None, None, None)
    elapsed = time.perf_counter() - start
    del g
    capture.clear_kernel_annotations()
    return elapsed


def best_of(runs: int, fn, *args) -> float:
    return min(fn(*args) for _ in range(runs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--repeat", type=int, default=200_000)
    parser.add_argument("--ops", type=int, default=4096, help="kernels per measured capture")
    parser.add_argument("--topology-nodes", type=int, default=20_000)
    args = parser.parse_args()

    results = {"backend": capture.backend()}
    capture.disable_annotations()
    results["disabled_scope_us"] = per_scope_us(args.repeat)
    capture.enable_annotations()
    capture.uninstall()
    results["enabled_not_capturing_scope_us"] = per_scope_us(args.repeat)  # asks the driver
    capture.install()
    results["enabled_not_capturing_installed_scope_us"] = per_scope_us(args.repeat)  # counts captures
    capture.disable_annotations()

    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available() and capture.is_available():
        x = torch.zeros(1024, device="cuda")
        x.add_(1)  # warm-up outside the capture
        torch.cuda.synchronize()
        ops = args.ops
        for per_scope in (1, 8):
            base = best_of(3, capture_seconds, torch, ops, per_scope, False, True)
            scoped = best_of(3, capture_seconds, torch, ops, per_scope, True, True)
            results[f"capture_scope_of_{per_scope}_kernels_us"] = (scoped - base) / (ops // per_scope) * 1e6
        nodes = args.topology_nodes
        plain = best_of(2, capture_seconds, torch, nodes, nodes, False, False)
        recorded = best_of(2, capture_seconds, torch, nodes, nodes, False, True)
        results["capture_end_per_node_us"] = (recorded - plain) / nodes * 1e6
        results["capture_end_nodes"] = nodes
    else:
        results["gpu"] = "not measured: no GPU or no id source"

    for key, value in results.items():
        print(f"{key:40s} {value:.3f}" if isinstance(value, float) else f"{key:40s} {value}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
