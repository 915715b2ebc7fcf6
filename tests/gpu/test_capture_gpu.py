"""cgfast.capture on a real GPU, checked against an independent reading of each graph:
cuda-bindings for its nodes, types, edges and kernel parameters, CUPTI node ids through
this file's own ctypes binding. Every recorded key must be ``exec_id << 32 | local_id``
of exactly the nodes its scope created (snapshots of the capture graph before and after
each scope)."""

from __future__ import annotations

import contextlib
import ctypes
import glob
import gzip
import json
import os
import shutil
import sys

import pytest

torch = pytest.importorskip("torch")
rt = pytest.importorskip("cuda.bindings.runtime")
drv = pytest.importorskip("cuda.bindings.driver")

from cgfast import capture  # noqa: E402

MASK = 0xFFFFFFFF
_NT = drv.CUgraphNodeType
ANNOTATABLE = {
    _NT.CU_GRAPH_NODE_TYPE_KERNEL: "kernel",
    _NT.CU_GRAPH_NODE_TYPE_MEMCPY: "memcpy",
    _NT.CU_GRAPH_NODE_TYPE_MEMSET: "memset",
}


def check(result):
    err, *values = result
    assert int(err) == 0, f"CUDA call failed: {err!r}"
    return values[0] if len(values) == 1 else values


def _load_cupti():
    paths = []
    with open("/proc/self/maps") as maps:
        paths += sorted({line.split()[-1] for line in maps if "libcupti.so" in line and "/" in line})
    for root in sys.path:
        paths += sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", "libcupti.so*")))
    paths += sorted(glob.glob("/usr/local/cuda*/targets/*/lib/libcupti.so*"))
    paths += sorted(glob.glob("/usr/local/cuda*/extras/CUPTI/lib64/libcupti.so*"))
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if all(
            hasattr(lib, name) for name in ("cuptiGetGraphNodeId", "cuptiGetGraphId", "cuptiGetGraphExecId")
        ):
            return lib
    pytest.skip("no libcupti to read ground-truth node ids with")


class Truth:
    """The graph as cuda-bindings and CUPTI see it, queried directly."""

    def __init__(self) -> None:
        self.cupti = _load_cupti()

    def node_id(self, node) -> int:
        out = ctypes.c_uint64()
        assert self.cupti.cuptiGetGraphNodeId(ctypes.c_void_p(int(node)), ctypes.byref(out)) == 0
        return out.value

    def graph_id(self, graph) -> int:
        out = ctypes.c_uint32()
        assert self.cupti.cuptiGetGraphId(ctypes.c_void_p(int(graph)), ctypes.byref(out)) == 0
        return out.value

    def exec_id(self, cuda_graph) -> int:
        out = ctypes.c_uint32()
        raw = cuda_graph.raw_cuda_graph_exec()
        assert self.cupti.cuptiGetGraphExecId(ctypes.c_void_p(int(raw)), ctypes.byref(out)) == 0
        return out.value

    def capture_graph(self):
        stream = rt.cudaStream_t(init_value=torch.cuda.current_stream().cuda_stream)
        status, _capture_id, graph, *_ = check(rt.cudaStreamGetCaptureInfo(stream))
        assert status == rt.cudaStreamCaptureStatus.cudaStreamCaptureStatusActive
        return graph

    def nodes(self, graph) -> list:
        _, count = check(rt.cudaGraphGetNodes(graph))
        if count == 0:
            return []
        nodes, count = check(rt.cudaGraphGetNodes(graph, numNodes=count))
        return list(nodes[:count])

    def node_type(self, node):
        return check(drv.cuGraphNodeGetType(node))

    def dependencies(self, node) -> list:
        count = check(drv.cuGraphNodeGetDependencies(node))[-1]
        if count == 0:
            return []
        values = check(drv.cuGraphNodeGetDependencies(node, numDependencies=count))
        return list(values[0][: values[-1]])

    def kernel_launch(self, node):
        params = check(drv.cuGraphKernelNodeGetParams(node))
        if int(params.func):
            name = check(drv.cuFuncGetName(params.func))
        else:
            name = check(drv.cuKernelGetName(params.kern))
        return (
            name.decode() if isinstance(name, bytes) else name,
            [params.gridDimX, params.gridDimY, params.gridDimZ],
            [params.blockDimX, params.blockDimY, params.blockDimZ],
        )

    def annotatable(self) -> dict:
        """node id -> kind of the current capture's kernel/memcpy/memset nodes."""
        kinds = {}
        for node in self.nodes(self.capture_graph()):
            kind = ANNOTATABLE.get(self.node_type(node))
            if kind is not None:
                kinds[self.node_id(node)] = kind
        return kinds

    @contextlib.contextmanager
    def span(self, spans: dict, name: str):
        """Record in ``spans[name]`` the annotatable nodes the block adds (only while
        the current stream is capturing: warm-up runs record nothing)."""
        if not torch.cuda.is_current_stream_capturing():
            yield
            return
        before = self.annotatable()
        yield
        after = self.annotatable()
        spans[name] = {node_id: kind for node_id, kind in after.items() if node_id not in before}


@pytest.fixture(scope="module")
def truth() -> Truth:
    return Truth()


pytestmark = pytest.mark.usefixtures("fresh_registry")


def exec_keys(exec_id: int, capture_ids) -> set:
    return {exec_id << 32 | (node_id & MASK) for node_id in capture_ids}


def keys_named(name: str) -> set:
    return {
        key
        for key, scopes in capture.get_kernel_annotations().items()
        if any(a.get("name") == name for a in scopes)
    }


def registry_for(exec_id: int, expected: dict) -> dict:
    """What the registry must hold: scope name -> (capture node ids, annotation)."""
    result = {}
    for node_ids, annotation in expected.values():
        for key in exec_keys(exec_id, node_ids):
            result[key] = [annotation]
    return result


def memset_async(tensor) -> None:
    stream = rt.cudaStream_t(init_value=torch.cuda.current_stream().cuda_stream)
    check(rt.cudaMemsetAsync(tensor.data_ptr(), 0, tensor.numel() * tensor.element_size(), stream))


def test_backend_is_available():
    print("cgfast.capture backend:", capture.backend())
    assert capture.is_available(), capture.backend()


def test_the_driver_is_called_through_functions_the_extension_resolved(truth):
    """Module boundaries' node counts and the capture-end walk go through the extension,
    which looked the functions up itself in the libcuda (and libcupti) this process has
    loaded: no fallback to ctypes, and what it reads agrees with cuda-bindings and CUPTI."""
    from cgfast import _cgfast
    from cgfast.capture._runtime import runtime

    backend = runtime.backend()
    assert backend is not None, capture.backend()
    graphs = backend.graphs
    assert graphs.node_count.func is _cgfast._graph_node_count
    x = torch.randn(4096, device="cuda")
    x.add_(1)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2
        y.add_(1)
        buf = torch.empty_like(y)
        buf.copy_(y)
        graph = truth.capture_graph()
        nodes = truth.nodes(graph)
        assert graphs.node_count(int(graph)) == len(nodes) >= 3
        if getattr(backend.ids, "path", None) is not None:  # CUPTI's library: one native walk
            count, entries, child_graphs = graphs.walk_topology(int(graph), backend.ids)
            assert (count, child_graphs) == (len(nodes), 0)
            assert [entry[0] for entry in entries] == sorted(truth.annotatable())


def test_single_stream_scopes_match_the_nodes_they_created(truth):
    x = torch.randn(1 << 16, device="cuda")
    buf = torch.empty_like(x)
    a = torch.randn(64, 256, device="cuda")
    w = torch.randn(256, 256, device="cuda")

    def work(spans):
        with truth.span(spans, "first"), capture.mark_kernels("first"):
            y = x * 2
        with truth.span(spans, "copy"), capture.mark_kernels({"name": "copy", "what": "d2d"}):
            buf.copy_(y)
        with truth.span(spans, "memset"), capture.mark_kernels("memset"):
            memset_async(buf)
        with truth.span(spans, "outer"), capture.mark_kernels({"name": "outer", "color": "red"}):
            z = a @ w
            with truth.span(spans, "inner"), capture.mark_kernels("inner"):
                z = torch.relu(z)
            total = z.sum() + y.sum()
        return total

    with capture.recording():
        warm = {}
        work(warm)  # eager: records nothing
        torch.cuda.synchronize()
    assert warm == {} and dict(capture.get_kernel_annotations()) == {}

    g = torch.cuda.CUDAGraph()
    spans = {}
    with capture.graph(g):
        work(spans)
    assert all(spans[name] for name in ("first", "copy", "memset", "outer", "inner")), spans
    assert "memcpy" in spans["copy"].values() and "memset" in spans["memset"].values()
    exec_id = truth.exec_id(g)
    inner = set(spans["inner"])
    expected = registry_for(
        exec_id,
        {
            "first": (spans["first"], {"name": "first"}),
            "copy": (spans["copy"], {"name": "copy", "what": "d2d"}),
            "memset": (spans["memset"], {"name": "memset"}),
            "inner": (inner, {"name": "inner", "color": "red"}),
            "outer": (set(spans["outer"]) - inner, {"name": "outer", "color": "red"}),
        },
    )
    assert dict(capture.get_kernel_annotations()) == expected
    g.replay()
    torch.cuda.synchronize()


def test_forked_streams_and_mark_stream(truth):
    x = torch.randn(1 << 16, device="cuda")
    side = torch.cuda.Stream()

    def work(spans):
        main = torch.cuda.current_stream()
        h = x * 2
        with truth.span(spans, "side"):
            side.wait_stream(main)
            with capture.mark_stream(side, "side"):
                u = (h + 1) * 3
        with truth.span(spans, "main"), capture.mark_kernels("main"):
            v = h - 1
        with truth.span(spans, "side again"), capture.mark_stream(side, {"name": "side again"}):
            u = u * 2
        with truth.span(spans, "current"), capture.mark_stream(main, "current"):
            v = v + 1
        main.wait_stream(side)
        with truth.span(spans, "join"), capture.mark_kernels("join"):
            out = u + v
        return out

    work({})
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    spans = {}
    with capture.graph(g):
        work(spans)
    assert all(spans.values()) and len(spans) == 5
    exec_id = truth.exec_id(g)
    registry = capture.get_kernel_annotations()
    lanes = {a["stream"] for key in exec_keys(exec_id, spans["side"]) for a in registry[key]}
    assert len(lanes) == 1
    (lane,) = lanes
    assert lane >= 60
    assert dict(registry) == registry_for(
        exec_id,
        {
            "side": (spans["side"], {"name": "side", "stream": lane}),
            "main": (spans["main"], {"name": "main"}),
            "side again": (spans["side again"], {"name": "side again", "stream": lane}),
            "current": (spans["current"], {"name": "current"}),
            "join": (spans["join"], {"name": "join"}),
        },
    )
    g.replay()
    torch.cuda.synchronize()


def test_graphs_in_sequence_and_kept_graphs(truth):
    x = torch.randn(4096, device="cuda")
    (x + 1).sin().cos()
    torch.cuda.synchronize()
    graphs = {}
    spans = {}
    for name in ("g1", "g2"):
        g = torch.cuda.CUDAGraph()
        with capture.graph(g):
            y = x + 1
            with truth.span(spans, name), capture.mark_kernels(name):
                y = (y * 2).sin()
        graphs[name] = g
    first = {name: exec_keys(truth.exec_id(g), spans[name]) for name, g in graphs.items()}
    assert first["g1"] and first["g2"] and not first["g1"] & first["g2"]
    assert {name: keys_named(name) for name in graphs} == first

    try:
        kept = torch.cuda.CUDAGraph(keep_graph=True)
    except TypeError:
        pytest.skip(f"torch {torch.__version__} has no keep_graph")
    with capture.graph(kept):
        with truth.span(spans, "kept"), capture.mark_kernels("kept"):
            x.cos()
        capture_id = truth.graph_id(truth.capture_graph())
    assert {key >> 32 for key in spans["kept"]} == {capture_id}
    assert keys_named("kept") == set(spans["kept"])
    kept.instantiate()
    first_exec = truth.exec_id(kept)
    assert keys_named("kept") == exec_keys(first_exec, spans["kept"])
    kept.instantiate()
    second_exec = truth.exec_id(kept)
    assert second_exec != first_exec
    assert keys_named("kept") == exec_keys(second_exec, spans["kept"])
    assert (
        set(capture.get_graph_topology()) >= {second_exec} and first_exec not in capture.get_graph_topology()
    )
    kept.replay()

    lazy = torch.cuda.CUDAGraph(keep_graph=True)
    with capture.graph(lazy), truth.span(spans, "lazy"), capture.mark_kernels("lazy"):
        x.tan()
    lazy.replay()  # instantiates on first replay
    assert keys_named("lazy") == exec_keys(truth.exec_id(lazy), spans["lazy"])
    assert {name: keys_named(name) for name in graphs} == first
    torch.cuda.synchronize()


def test_make_graphed_callables_under_recording(truth, monkeypatch):
    capture.install()
    seen = []  # (graph, capture graph id)
    patched_capture_end = torch.cuda.CUDAGraph.capture_end

    def capture_end_spy(self, *args, **kwargs):
        capture_id = truth.graph_id(truth.capture_graph())
        patched_capture_end(self, *args, **kwargs)
        seen.append((self, capture_id))

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_end", capture_end_spy)
    forward_spans = []

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 64)

        def forward(self, inp):
            spans = {}
            with truth.span(spans, "block"), capture.mark_kernels("block.forward"):
                out = torch.relu(self.lin(inp))
            if spans:
                forward_spans.append(spans["block"])
            return out

    block = Block().cuda()
    x = torch.randn(8, 64, device="cuda", requires_grad=True)
    with capture.recording():
        graphed = torch.cuda.make_graphed_callables(block, (x,))
    assert len(forward_spans) == 1 and forward_spans[0]
    exec_of = {capture_id: truth.exec_id(g) for g, capture_id in seen}
    assert len(exec_of) == 2  # forward and backward graphs
    created = forward_spans[0]
    (capture_id,) = {node_id >> 32 for node_id in created}
    assert keys_named("block.forward") == exec_keys(exec_of[capture_id], created)
    assert set(capture.get_kernel_annotations()) == keys_named("block.forward")
    assert set(capture.get_graph_topology()) == set(exec_of.values())
    graphed(x).sum().backward()
    torch.cuda.synchronize()


def test_install_makes_a_plain_torch_cuda_graph_record(truth):
    capture.uninstall()
    assert capture.install() and capture.install()
    x = torch.randn(4096, device="cuda")
    x.exp()
    torch.cuda.synchronize()
    capture.enable_annotations()
    g = torch.cuda.CUDAGraph()
    spans = {}
    with torch.cuda.graph(g):
        y = x + 1
        with truth.span(spans, "plain"), capture.mark_kernels("plain"):
            y = y.exp() * 3
    assert spans["plain"]
    assert dict(capture.get_kernel_annotations()) == registry_for(
        truth.exec_id(g), {"plain": (spans["plain"], {"name": "plain"})}
    )
    capture.disable_annotations()
    off = torch.cuda.CUDAGraph()
    with torch.cuda.graph(off), capture.mark_kernels("off"):
        x.exp()
    assert keys_named("off") == set()
    assert set(capture.get_graph_topology()) == {truth.exec_id(g)}


def test_recording_started_inside_a_running_capture(truth):
    capture.uninstall()
    x = torch.randn(4096, device="cuda")
    x.exp()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    spans = {}
    with torch.cuda.graph(g):  # begun before anything was patched
        y = x + 1
        with capture.recording(), truth.span(spans, "late"), capture.mark_kernels("late"):
            y = y.exp() * 3
    assert spans["late"]
    assert dict(capture.get_kernel_annotations()) == registry_for(
        truth.exec_id(g), {"late": (spans["late"], {"name": "late"})}
    )
    assert set(capture.get_graph_topology()) == {truth.exec_id(g)}


def test_topology_matches_the_graph(truth):
    x = torch.randn(1 << 14, device="cuda")
    a = torch.randn(128, 256, device="cuda")
    w = torch.randn(256, 256, device="cuda")
    side = torch.cuda.Stream()
    event = check(rt.cudaEventCreateWithFlags(rt.cudaEventDisableTiming))

    def work():
        main = torch.cuda.current_stream()
        y = x * 2
        side.wait_stream(main)
        with torch.cuda.stream(side):
            u = torch.relu(a @ w)
        if torch.cuda.is_current_stream_capturing():  # an event-record node between kernels
            stream = rt.cudaStream_t(init_value=main.cuda_stream)
            check(rt.cudaEventRecordWithFlags(event, stream, rt.cudaEventRecordExternal))
        v = y + 1
        main.wait_stream(side)
        return u.sum() + v.sum()

    work()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with capture.graph(g):
        with capture.mark_kernels("work"):
            work()
        snapshot = {}
        for node in truth.nodes(truth.capture_graph()):
            node_type = truth.node_type(node)
            launch = (
                truth.kernel_launch(node)
                if node_type == _NT.CU_GRAPH_NODE_TYPE_KERNEL
                else (None, None, None)
            )
            deps = [truth.node_id(dep) for dep in truth.dependencies(node)]
            snapshot[truth.node_id(node)] = (node_type, deps, launch)
    exec_id = truth.exec_id(g)
    assert any(t == _NT.CU_GRAPH_NODE_TYPE_EVENT_RECORD for t, _, _ in snapshot.values())

    def annotatable_ancestors(node_id):
        found = set()
        for dep in snapshot[node_id][1]:
            if snapshot[dep][0] in ANNOTATABLE:
                found.add(dep)
            else:
                found |= annotatable_ancestors(dep)
        return found

    high = exec_id << 32
    expected = []
    for node_id in sorted((n for n in snapshot if snapshot[n][0] in ANNOTATABLE), key=lambda n: n & MASK):
        node_type, _, (name, grid, block) = snapshot[node_id]
        expected.append(
            {
                "id": high | (node_id & MASK),
                "type": ANNOTATABLE[node_type],
                "name": name,
                "deps": sorted(high | (dep & MASK) for dep in annotatable_ancestors(node_id)),
                "grid": grid,
                "block": block,
            }
        )
    topology = capture.get_graph_topology()
    assert list(topology) == [exec_id]
    assert topology[exec_id] == expected
    assert all(n["name"] for n in expected if n["type"] == "kernel")
    assert sum(n["type"] == "kernel" for n in expected) >= 4
    g.replay()
    torch.cuda.synchronize()
    check(rt.cudaEventDestroy(event))


def test_trace_handler_writes_trace_annotations_and_annotated_trace(truth, tmp_path):
    import cgfast
    from cgfast.profiler import trace_handler

    if not callable(getattr(cgfast, "annotate_file", None)):
        pytest.skip("the Rust extension has no annotate_file yet")
    from torch.profiler import ProfilerActivity, profile

    x = torch.randn(1 << 16, device="cuda")
    (x * 2).sin()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with capture.graph(g):
        y = x + 1
        with capture.mark_kernels({"name": "profiled", "layer": 1}):
            y = (y * 2).sin()
    assert keys_named("profiled")
    handler = trace_handler(tmp_path / "traces")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], on_trace_ready=handler):
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
    names = sorted(os.listdir(tmp_path / "traces"))
    trace = os.path.basename(handler.trace_path)
    assert trace.startswith("000000.") and trace.endswith(".pt.trace.json.gz")
    annotated = trace.replace(".json.gz", ".annotated.json.gz")
    assert set(names) == {trace, annotated, os.path.basename(handler.annotations_path)}
    with gzip.open(tmp_path / "traces" / annotated, "rt") as f:
        events = json.load(f)["traceEvents"]
    assert any(e.get("cat") == "kernel" for e in events)
    assert capture.load_annotations(handler.annotations_path) == dict(capture.get_kernel_annotations())
    out = os.environ.get("OUT")
    if out:
        # a folder of its own: annotations in $OUT itself would be found, one level up,
        # for traces that end-to-end tests keep in $OUT/<name>
        keep = os.path.join(out, "trace_handler")
        os.makedirs(keep, exist_ok=True)
        for name in (annotated, os.path.basename(handler.annotations_path)):
            shutil.copy(tmp_path / "traces" / name, os.path.join(keep, name))
