"""Child-graph bodies on the GPU: the keys cgfast gives the kernels of child-graph bodies
are the ``graph node id`` CUPTI reports for them, with the annotation of the scope (or
module) that added the child-graph node.

Ground truth: CUPTI's own kernel activity records of two replays, collected in a process
of its own (``cupti_records``); each kernel's expected annotation follows from its op
(every op appears in one place only). The graph: ``add`` in a ``mark_kernels("before")``
scope, a module adding a child graph whose body runs ``mul`` and ``exp``, a second module
adding one running ``cos`` and ``sin``, then ``abs`` in ``mark_kernels("after")``.
A second test replays it under torch.profiler with cgfast's trace handler and checks the
annotated trace (torch <= 2.12: ids recovered from the topology, body kernels included).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXPECTED = {
    "add": {"name": "before"},
    "mul": {"module": "0"},
    "exp": {"module": "0"},
    "cos": {"module": "1"},
    "sin": {"module": "1"},
    "abs": {"name": "after"},
}


def op_of(kernel_name: str):
    lowered = kernel_name.lower()
    found = [op for op in EXPECTED if f"{op}_kernel" in lowered or f"{op}functor" in lowered]
    if "functoronself_add" in lowered:
        found.append("add")
    return found[0] if len(found) == 1 else None


def capture_graph():
    """The graph of this file's docstring, captured with cgfast recording; returns it, its
    exec id, and what it uses (kept alive by the caller)."""
    import torch

    from cgfast import capture
    from cgfast.capture._runtime import runtime

    x = torch.ones(4096, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for op in ("add_", "abs_", "mul_", "exp_", "cos_", "sin_"):
            getattr(x, op)(*([1] if op in ("add_", "mul_") else []))
    torch.cuda.current_stream().wait_stream(side)

    bodies = []
    for ops in (("mul_", "exp_"), ("cos_", "sin_")):
        body = torch.cuda.CUDAGraph(keep_graph=True)
        with torch.cuda.graph(body):
            for op in ops:
                getattr(x, op)(*([1.0] if op == "mul_" else []))
        bodies.append(body)

    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuGraphAddChildGraphNode.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    lib.cuGraphAddChildGraphNode.argtypes += [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    lib.cuStreamUpdateCaptureDependencies.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    lib.cuStreamUpdateCaptureDependencies.argtypes += [ctypes.c_uint]

    class AddsChildGraph(torch.nn.Module):
        def __init__(self, body):
            super().__init__()
            self.body = body

        def forward(self, x):
            stream = torch.cuda.current_stream().cuda_stream
            graphs = runtime.backend().graphs
            capture_state = graphs.capture_state(stream)
            frontier = capture_state.frontier
            deps = (ctypes.c_void_p * max(1, len(frontier)))(*frontier)
            node = ctypes.c_void_p()
            code = lib.cuGraphAddChildGraphNode(
                ctypes.byref(node), capture_state.graph, deps, len(frontier), self.body.raw_cuda_graph()
            )
            assert code == 0, f"cuGraphAddChildGraphNode: {code}"
            only = (ctypes.c_void_p * 1)(node.value)
            code = lib.cuStreamUpdateCaptureDependencies(stream, only, 1, 1)  # set the frontier
            assert code == 0, f"cuStreamUpdateCaptureDependencies: {code}"
            return x

    model = torch.nn.Sequential(AddsChildGraph(bodies[0]), AddsChildGraph(bodies[1]))
    graph = torch.cuda.CUDAGraph()
    with capture.annotate_modules(model), capture.recording(), torch.cuda.graph(graph):
        with capture.mark_kernels("before"):
            x.add_(1)
        model(x)
        with capture.mark_kernels("after"):
            x.abs_()
    torch.cuda.synchronize()
    return graph, runtime.backend().ids.exec_id(graph.raw_cuda_graph_exec()), (bodies, model, x)


def measure(out_path: str) -> None:
    """In a process of its own: capture, replay twice under CUPTI activity, write the
    records with cgfast's annotations and topology of the graph."""
    import torch

    sys.path.insert(0, HERE)
    from cgfast import capture
    from cupti_records import kernel_records

    graph, exec_id, _ = capture_graph()
    with kernel_records() as records:
        for _ in range(2):
            graph.replay()
        torch.cuda.synchronize()
    annotations = capture.get_kernel_annotations()
    result = {
        "backend": capture.backend(),
        "exec_id": exec_id,
        "records": [dict(r, annotations=annotations.get(r["graphNodeId"])) for r in records],
        "topology_ids": [node["id"] for node in capture.get_graph_topology().get(exec_id, [])],
        "annotation_keys": sorted(annotations),
    }
    with open(out_path, "w") as out:
        json.dump(result, out, indent=1)


def profile(out_path: str, directory: str) -> None:
    """In a process of its own: capture, replay three times under torch.profiler with
    cgfast's trace handler (torch <= 2.12 writes no graph node id: recovery gives them),
    write every replayed kernel event of the annotated trace."""
    import gzip

    import torch

    from cgfast.profiler import trace_handler

    graph, exec_id, _ = capture_graph()
    graph.replay()
    torch.cuda.synchronize()
    handler = trace_handler(directory)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities, on_trace_ready=handler):
        for _ in range(3):
            graph.replay()
        torch.cuda.synchronize()
    with gzip.open(handler.annotate_result["output"], "rt") as annotated_file:
        events = json.load(annotated_file)["traceEvents"]
    launches = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") == "cuda_runtime" and e.get("name", "").startswith("cudaGraphLaunch")
    }
    kernels = [
        {"name": e["name"], "args": e["args"]}
        for e in events
        if e.get("cat") == "kernel" and e.get("args", {}).get("correlation") in launches
    ]
    with open(out_path, "w") as out:
        json.dump({"exec_id": exec_id, "kernels": kernels}, out, indent=1)


def test_child_graph_body_kernels_carry_the_scope_of_their_child_node(tmp_path):
    out_path = str(tmp_path / "bodies.json")
    done = subprocess.run(
        [sys.executable, __file__, out_path], capture_output=True, text=True, timeout=240, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with open(out_path) as result_file:
        result = json.load(result_file)
    replayed = [r for r in result["records"] if r["graphId"] == result["exec_id"]]
    assert len(replayed) == 2 * len(EXPECTED), [r["name"] for r in result["records"]]
    right = [r for r in replayed if r["annotations"] == [EXPECTED[op_of(r["name"])]]]
    body = [r for r in replayed if op_of(r["name"]) in ("mul", "exp", "cos", "sin")]
    figures = {
        "backend": result["backend"],
        "replayed_kernels": len(replayed),
        "body_kernels": len(body),
        "right_annotation": len(right),
        "body_ids": sorted({r["graphNodeId"] & 0xFFFFFFFF for r in body}),
        "topology_local_ids": sorted(i & 0xFFFFFFFF for i in result["topology_ids"]),
    }
    out_dir = os.environ.get("CGFAST_E2E_OUT")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "bodies_gpu.json"), "w") as out:
            json.dump({**figures, "records": replayed}, out, indent=1)
    assert len(right) == len(replayed), json.dumps(replayed, indent=1)
    assert sorted(set(result["topology_ids"])) == sorted({r["graphNodeId"] for r in replayed})


def test_child_graph_body_kernels_are_annotated_in_a_profiler_trace(tmp_path):
    """The same graph through torch.profiler and cgfast's trace handler: every kernel of
    every replay, body kernels included, gets its node id (recovered from the topology
    on torch <= 2.12) and the annotation of its scope or module."""
    out_path = str(tmp_path / "trace_kernels.json")
    done = subprocess.run(
        [sys.executable, __file__, out_path, str(tmp_path / "traces")],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with open(out_path) as result_file:
        result = json.load(result_file)
    kernels = result["kernels"]

    def right(kernel) -> bool:
        expected = EXPECTED.get(op_of(kernel["name"]))
        got = {key: value for key, value in kernel["args"].items() if key in ("name", "module")}
        return (
            expected is not None
            and bool(kernel["args"].get("graph node id"))
            and got == {key: str(value) for key, value in expected.items()}
        )

    wrong = [kernel for kernel in kernels if not right(kernel)]
    out_dir = os.environ.get("CGFAST_E2E_OUT")
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "bodies_trace_gpu.json"), "w") as out:
            json.dump(
                {"replayed_kernels": len(kernels), "wrong": len(wrong), "kernels": kernels}, out, indent=1
            )
    assert len(kernels) == 3 * len(EXPECTED)
    assert wrong == [], json.dumps(wrong[:4], indent=1)


if __name__ == "__main__":
    if len(sys.argv) == 3:
        profile(sys.argv[1], sys.argv[2])
    else:
        measure(sys.argv[1])
