"""GPU probe: which ids do kernels inside child-graph and conditional bodies carry?

    python3 tools/probe_graph_bodies.py --out bodies.json

Builds, with torch's capture, (1) a graph whose middle node is a child-graph node (its
body captured first with ``keep_graph=True`` and added during the parent's capture with
``cuGraphAddChildGraphNode``) and (2), where torch has ``begin_capture_to_if_node``, a
graph with an IF conditional node whose body runs (torch.cond's eager capture path).
For every node of the parent graphs, of the embedded child graph and of the bodies it
writes ``cuptiGetGraphNodeId``; then replays each executable graph twice, once in a
subprocess recording CUPTI's kernel activity records itself (``graphNodeId``,
``graphId``) and once in a subprocess under ``torch.profiler`` (what the trace's kernel
events carry). Every kernel of a body has its own op (parents: add, abs; child body: mul,
exp; conditional body: cos, sin) so the records can be told apart by name. The output
says, per body kernel, whether its reported id equals the id of a node we can read at
capture (and which: the body graph's, the embedded copy's, or the exec-rekeyed local id).
A measurement, not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import os
import subprocess
import sys
import tempfile
import traceback

SET_CAPTURE_DEPENDENCIES = 1
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "gpu"))


OPS = {"add": "parent", "abs": "parent", "mul": "child body", "exp": "child body"}
OPS.update({"cos": "conditional body", "sin": "conditional body"})


def op_of(kernel_name: str) -> str | None:
    lowered = kernel_name.lower()
    for op in OPS:
        if f"{op}_kernel" in lowered or f"{op}functor" in lowered or f"_{op}" in lowered:
            return op
    return None


def build(result: dict):
    """Capture the graphs; returns [(name, CUDAGraph)] to replay and fills ``result``."""
    import torch

    from cgfast.capture._id_sources import CuptiIdSource, libcupti_candidates
    from cgfast.capture._libcuda import LibcudaGraphs

    graphs = LibcudaGraphs.load()
    lib = graphs._lib
    ids = None
    for path in libcupti_candidates(13):
        try:
            ids = CuptiIdSource(path)
            break
        except Exception:
            continue
    result["cupti"] = ids.path if ids else None

    def describe(graph: int) -> dict:
        nodes = graphs.nodes(graph)
        out = {"graph_id": ids.graph_id(graph), "nodes": []}
        for node in nodes:
            node_type = graphs.node_type(node)
            entry = {"type": node_type, "id": ids.node_id(node)}
            entry["id_hi"], entry["id_lo"] = entry["id"] >> 32, entry["id"] & 0xFFFFFFFF
            if node_type == 0:
                entry["name"] = graphs.kernel_launch(node).name
            if node_type == 4:  # child graph: the copy embedded in the parent
                child = ctypes.c_void_p()
                lib.cuGraphChildGraphNodeGetGraph.argtypes = [
                    ctypes.c_void_p,
                    ctypes.POINTER(ctypes.c_void_p),
                ]
                code = lib.cuGraphChildGraphNodeGetGraph(ctypes.c_void_p(node), ctypes.byref(child))
                entry["embedded"] = describe(child.value) if code == 0 else f"error {code}"
            out["nodes"].append(entry)
        return out

    x = torch.ones(4096, device="cuda")
    pred = torch.tensor(True, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for op in ("add_", "abs_", "mul_", "exp_", "cos_", "sin_"):
            getattr(x, op)(*([1] if op in ("add_", "mul_") else []))
        torch.logical_not(pred)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    replays = []

    # (1) a child-graph node
    try:
        body = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(body):
            x.mul_(1.0)
            x.exp_()
        body_graph = body.raw_cuda_graph()
        result["child_body_original"] = describe(body_graph)
        parent = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(parent):
            x.add_(1)
            stream = torch.cuda.current_stream().cuda_stream
            state = graphs.capture_state(stream)
            deps = (ctypes.c_void_p * max(1, len(state.frontier)))(*state.frontier)
            node = ctypes.c_void_p()
            lib.cuGraphAddChildGraphNode.argtypes = [
                ctypes.POINTER(ctypes.c_void_p),
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.c_size_t,
                ctypes.c_void_p,
            ]
            code = lib.cuGraphAddChildGraphNode(
                ctypes.byref(node), ctypes.c_void_p(state.graph), deps, len(state.frontier), body_graph
            )
            if code:
                raise RuntimeError(f"cuGraphAddChildGraphNode: {code}")
            lib.cuStreamUpdateCaptureDependencies.argtypes = [
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.c_size_t,
                ctypes.c_uint,
            ]
            only = (ctypes.c_void_p * 1)(node.value)
            code = lib.cuStreamUpdateCaptureDependencies(
                ctypes.c_void_p(stream), only, 1, SET_CAPTURE_DEPENDENCIES
            )
            if code:
                raise RuntimeError(f"cuStreamUpdateCaptureDependencies: {code}")
            x.abs_()
        parent.instantiate()
        result["child_parent"] = describe(parent.raw_cuda_graph())
        result["child_exec_id"] = ids.exec_id(parent.raw_cuda_graph_exec())
        replays.append(("child", parent))
        result["_keep"] = [body, parent]
    except Exception:
        result["child_error"] = traceback.format_exc()

    # (2) an IF conditional node (what torch.cond captures to)
    if not hasattr(torch.cuda.CUDAGraph, "begin_capture_to_if_node"):
        result["conditional_error"] = "torch.cuda.CUDAGraph has no begin_capture_to_if_node"
    else:
        try:
            from torch._higher_order_ops.cudagraph_conditional_nodes import _if_body

            cond = torch.cuda.CUDAGraph(keep_graph=True)
            with torch.cuda.graph(cond):
                x.add_(1)
                with _if_body(pred):
                    body_graph = graphs.capture_graph(torch.cuda.current_stream().cuda_stream)
                    x.cos_()
                    x.sin_()
                x.abs_()
            cond.instantiate()
            result["conditional_parent"] = describe(cond.raw_cuda_graph())
            result["conditional_body"] = describe(body_graph)
            result["conditional_exec_id"] = ids.exec_id(cond.raw_cuda_graph_exec())
            replays.append(("conditional", cond))
            result.setdefault("_keep", []).append(cond)
        except Exception:
            result["conditional_error"] = traceback.format_exc()
    return replays


def replay(replays) -> None:
    import torch

    for _ in range(2):
        for _, graph in replays:
            graph.replay()
    torch.cuda.synchronize()


def run_cupti(result: dict) -> None:
    """Replay with our own CUPTI activity buffers (no torch.profiler in this process)."""
    from cupti_records import kernel_records

    with kernel_records() as records:
        replays = build(result)
        replay(replays)
    result["records"] = [
        dict(record, id_hi=record["graphNodeId"] >> 32, id_lo=record["graphNodeId"] & 0xFFFFFFFF)
        for record in records
    ]


def run_profiler(result: dict) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    replays = build(result)
    replay(replays)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        replay(replays)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as trace:
            events = json.load(trace)["traceEvents"]
    result["torch"] = torch.__version__
    result["kernels"] = [
        {"name": e.get("name"), "ts": e.get("ts"), "args": e.get("args", {})}
        for e in events
        if e.get("cat") == "kernel"
    ]


def analyse(cupti: dict, profiler: dict) -> dict:
    """Per kernel record of a probe graph's replays: which id read at capture it equals,
    among the capture graph's and the bodies' own ids (``cuptiGetGraphNodeId``), and the
    capture graph's local ids rekeyed to the executable graph, with body nodes numbered
    after the parent's nodes, body by body (what cgfast.capture keys them by)."""
    findings: dict = {}
    for graph in ("child", "conditional"):
        parent = cupti.get(f"{graph}_parent")
        if parent is None:
            continue
        exec_id = cupti.get(f"{graph}_exec_id")
        high = exec_id << 32
        known = {}
        offset = len(parent["nodes"])
        for entry in parent["nodes"]:
            known[entry["id"]] = f"capture graph node {entry['id_lo']} (its own id)"
            known[high | entry["id_lo"]] = f"capture graph node {entry['id_lo']}, rekeyed to the exec graph"
            embedded = entry.get("embedded")
            for inner in embedded.get("nodes", []) if isinstance(embedded, dict) else []:
                known[inner["id"]] = f"embedded body node {inner['id_lo']} (its own id)"
                known[high | (offset + inner["id_lo"])] = (
                    f"embedded body node {inner['id_lo']}, numbered after the parent's nodes"
                )
            if isinstance(embedded, dict):
                offset += len(embedded.get("nodes", []))
        body = cupti.get("child_body_original" if graph == "child" else "conditional_body") or {}
        for entry in body.get("nodes", []):
            known.setdefault(entry["id"], f"body graph node {entry['id_lo']} (its own id)")
        seen = []
        for record in cupti.get("records", []):
            op = op_of(record["name"] or "")
            if op is None or (record["graphId"] != exec_id and record["id_hi"] != exec_id):
                continue
            seen.append(
                {
                    "op": op,
                    "role": OPS[op],
                    "graphNodeId": record["graphNodeId"],
                    "hi": record["id_hi"],
                    "lo": record["id_lo"],
                    "graphId": record["graphId"],
                    "equals": known.get(record["graphNodeId"]),
                }
            )
        findings[graph] = {"exec_id": exec_id, "kernels": seen}
    trace_keys = sorted({key for k in profiler.get("kernels", []) for key in k["args"]})
    findings["trace_kernel_arg_keys"] = trace_keys
    findings["trace_has_graph_node_id"] = any(
        "graph node id" in k["args"] for k in profiler.get("kernels", [])
    )
    return findings


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--mode", choices=["both", "cupti", "profiler"], default="both")
    args = parser.parse_args(argv)
    if args.mode != "both":
        result: dict = {}
        try:
            (run_cupti if args.mode == "cupti" else run_profiler)(result)
        except Exception:
            result["error"] = traceback.format_exc()
        result.pop("_keep", None)
        with open(args.out, "w") as out:
            json.dump(result, out, indent=1, default=str)
        return 0
    parts = {}
    for mode in ("cupti", "profiler"):
        path = f"{args.out}.{mode}.json"
        done = subprocess.run([sys.executable, __file__, "--mode", mode, "--out", path], timeout=120)
        try:
            with open(path) as part:
                parts[mode] = json.load(part)
        except OSError:
            parts[mode] = {"error": f"exit {done.returncode}, no output"}
    findings = analyse(parts["cupti"], parts["profiler"])
    with gzip.open(args.out + ".parts.json.gz", "wt") as out:
        json.dump(parts, out, default=str)
    with open(args.out, "w") as out:
        json.dump(findings, out, indent=1, default=str)
    print(json.dumps(findings, indent=1, default=str)[:6000])
    for mode, part in parts.items():
        for key in ("error", "child_error", "conditional_error"):
            if key in part:
                print(f"{mode} {key}: {part[key][-1500:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
