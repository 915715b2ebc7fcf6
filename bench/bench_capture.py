"""Cost of cgfast.capture scopes.

    python bench/bench_capture.py [--json out.json]
    python bench/bench_capture.py --against OTHER/python [--rounds 9]

Always: a scope's enter+exit while annotations are disabled, and while enabled but not
capturing, without and with ``install()``'s patches (which count captures in progress,
so the driver need not be asked), the way Inductor's generated code opens them (a new
object per launch, ``__enter__``/``__exit__`` by hand). On a machine without a GPU the
enabled figures are the no-backend path.
With a GPU also: the added cost of a scope during capture (1 and 8 kernels per scope,
relative to the same capture without scopes) and of resolving, recording the topology
and remapping at capture end, per graph node.

Replay: what ``install()``'s patched ``CUDAGraph.replay`` adds to a replay call outside
a profiler session (a check of torch's profiler flag; target < 0.2 µs), measured on a
class whose ``replay`` does nothing (so the call itself is all there is), patched as
``install()`` patches torch's, replaying a recorded graph; and what it costs under an
active CPU profiler (the ``cgfast.replay`` range). With a GPU also the same on a real
``torch.cuda.CUDAGraph`` of one kernel.

``--against`` runs it for this build and another one, side by side (``side_by_side.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import cgfast
from capture_build import KEYS_ATTR, GraphKeys, class_is_patched, patch_class, unpatch_class
from cgfast import capture
from side_by_side import side_by_side


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


class CheapGraph:
    """The methods ``install()`` patches, each doing nothing."""

    def capture_begin(self):
        pass

    def capture_end(self):
        pass

    def raw_cuda_graph_exec(self):
        return 0

    def replay(self):
        pass


def per_replay_us(graph, repeat: int) -> float:
    best = float("inf")
    for _ in range(5):
        replay = graph.replay
        start = time.perf_counter()
        for _ in range(repeat):
            replay()
        best = min(best, time.perf_counter() - start)
    return best / repeat * 1e6


def replay_figures(graph, recorded: bool, repeat: int, prefix: str) -> dict:
    """A replay call of ``graph`` unpatched, patched (outside and inside a profiler
    session), and the patch's overhead outside one; ``graph``'s class is left unpatched."""
    cls = type(graph)
    was_patched = class_is_patched(cls)
    unpatch_class(cls)
    out = {f"{prefix}_unpatched_us": per_replay_us(graph, repeat)}
    patch_class(cls)
    if recorded:
        keys = GraphKeys(1, None)
        keys.key_id = 2  # remapped to its executable graph, as after a capture
        setattr(graph, KEYS_ATTR, keys)
    out[f"{prefix}_patched_us"] = per_replay_us(graph, repeat)
    out[f"{prefix}_patch_overhead_us"] = out[f"{prefix}_patched_us"] - out[f"{prefix}_unpatched_us"]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            out[f"{prefix}_stamped_under_profiler_us"] = per_replay_us(graph, max(1, repeat // 100))
    if not was_patched:
        unpatch_class(cls)
    return out


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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--repeat", type=int, default=200_000)
    parser.add_argument("--ops", type=int, default=4096, help="kernels per measured capture")
    parser.add_argument("--topology-nodes", type=int, default=20_000)
    parser.add_argument("--against", metavar="DIR", help="also time the cgfast build in DIR, side by side")
    parser.add_argument("--rounds", type=int, default=9, help="with --against: runs per build")
    args = parser.parse_args(argv)
    if args.against:
        forwarded = [
            "--repeat",
            str(args.repeat),
            "--ops",
            str(args.ops),
            "--topology-nodes",
            str(args.topology_nodes),
        ]
        return side_by_side(__file__, forwarded, args.against, args.rounds, args.json)

    results = {"backend": capture.backend(), "cgfast": os.path.realpath(cgfast.__file__)}
    capture.disable_annotations()
    results["disabled_scope_us"] = per_scope_us(args.repeat)
    capture.enable_annotations()
    capture.uninstall()
    results["enabled_not_capturing_scope_us"] = per_scope_us(args.repeat)  # asks the driver
    capture.install()
    results["enabled_not_capturing_installed_scope_us"] = per_scope_us(args.repeat)  # counts captures
    capture.disable_annotations()
    results.update(replay_figures(CheapGraph(), True, args.repeat, "replay_noop"))

    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available() and capture.is_available():
        y = torch.zeros(16, device="cuda")
        g = torch.cuda.CUDAGraph()
        with capture.graph(g):
            y.add_(1)
        torch.cuda.synchronize()
        results.update(replay_figures(g, False, args.repeat // 10, "replay_gpu"))
        keys = getattr(g, "_cgfast_keys", None)
        if keys is not None:
            results.update(replay_figures(g, True, args.repeat // 10, "replay_gpu_recorded"))
        torch.cuda.synchronize()
        capture.clear_kernel_annotations()
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
