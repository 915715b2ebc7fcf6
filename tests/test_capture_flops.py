"""FLOPs and bytes at capture (``annotate_modules(..., flops=True)``) on the fake driver,
with real timm and Hugging Face models running on the CPU: every aten op the model runs
adds a kernel node to the fake capture, and the FLOPs recorded on a module's nodes must
sum to what ``torch.utils.flop_counter.FlopCounterMode`` gives that module in an eager
run of the same model."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import cgfast  # noqa: E402
from cgfast import annotations as annotation_files  # noqa: E402
from cgfast import capture  # noqa: E402
from cgfast.capture._runtime import runtime  # noqa: E402
from fake_graph_driver import FakeCUDAGraph, capturing  # noqa: E402
from trace_files import kernel, read_json, write_trace  # noqa: E402


class LaunchEachOp(TorchDispatchMode):
    """Every aten op launches ``nodes_per_op`` fake kernels named after it; remembers the
    sizes of its tensors, read independently (torch's pytree)."""

    def __init__(self, driver, nodes_per_op=1):
        super().__init__()
        self.driver = driver
        self.nodes_per_op = nodes_per_op
        self.launched = []  # (op name, its fake nodes, the bytes of its tensors)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        nodes = [self.driver.launch(str(func)) for _ in range(self.nodes_per_op)]
        leaves = torch.utils._pytree.tree_leaves((args, kwargs, out))
        nbytes = sum(leaf.nbytes for leaf in leaves if isinstance(leaf, torch.Tensor))
        self.launched.append((str(func), nodes, nbytes))
        return out


def capture_with_counts(fake, model, run, *, flops=True, nodes_per_op=1):
    launcher = LaunchEachOp(fake, nodes_per_op)
    g = FakeCUDAGraph(fake)
    # the launcher is under the counting mode, which the capture's begin puts on top
    with capture.annotate_modules(model, flops=flops), launcher, capturing(g):
        run()
    return g, launcher


def flops_by_module(model, graph_exec_id, phase=None):
    """Module name -> FLOPs of its nodes of ``autograd_phase`` ``phase`` (``None``:
    forward) and its submodules' (as FlopCounterMode sums them, for modules that are
    called: not a ``ModuleList`` or ``ModuleDict``), and the total of every counted node."""
    containers = {
        name
        for name, module in model.named_modules()
        if isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict))
    }
    annotations = capture.get_kernel_annotations()
    innermost = {}
    total = 0
    for node_id, counts in capture.get_kernel_op_counts().items():
        assert node_id >> 32 == graph_exec_id
        total += counts["flops"]
        items = annotations.get(node_id)
        if items and "module" in items[0] and items[0].get("autograd_phase") == phase:
            name = items[0]["module"]
            innermost[name] = innermost.get(name, 0) + counts["flops"]
    inclusive = {}
    for name, flops in innermost.items():
        parts = name.split(".") if name else []
        for depth in range(len(parts) + 1):
            outer = ".".join(parts[:depth])
            if outer not in containers:
                inclusive[outer] = inclusive.get(outer, 0) + flops
    return {name: flops for name, flops in inclusive.items() if flops}, total


def flop_counter_by_module(model, run):
    """FlopCounterMode's per-module FLOPs of an eager ``run``, named as
    ``model.named_modules()`` names them (it names the root by its class), and its total."""
    with FlopCounterMode(display=False) as counter:
        run()
    root = type(model).__name__
    counts = {}
    for name, by_op in counter.get_flop_counts().items():
        if name == "Global":
            continue
        assert name == root or name.startswith(root + "."), name
        flops = sum(by_op.values())
        if flops:
            counts[name[len(root) + 1 :]] = flops
    return counts, counter.get_total_flops()


def resnet18():
    torch.manual_seed(0)
    return timm.create_model("resnet18", pretrained=False).eval()


def llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return transformers.LlamaForCausalLM(config).eval()


@pytest.mark.parametrize(
    "make,inputs",
    [(resnet18, lambda: torch.randn(2, 3, 32, 32)), (llama, lambda: torch.randint(0, 128, (1, 8)))],
)
def test_module_flops_equal_flop_counter_modes(fake, make, inputs):
    model = make()
    x = inputs()

    def forward():
        with torch.no_grad():
            model(x)

    expected, expected_total = flop_counter_by_module(model, forward)
    g, launcher = capture_with_counts(fake, model, forward)
    got, total = flops_by_module(model, g.graph_exec.id)
    assert expected_total > 0 and total == expected_total
    assert got == expected
    assert len(expected) > 10  # many modules, not only the root
    counts = capture.get_kernel_op_counts()
    recorded_bytes = [
        counts[g.graph_exec.id << 32 | node.local_id]["bytes"] for _, [node], _ in launcher.launched
    ]
    assert recorded_bytes == [nbytes for _, _, nbytes in launcher.launched]
    assert sum(nbytes > 0 for nbytes in recorded_bytes) > 40  # all but empty() and the like


def test_a_training_step_counts_what_flop_counter_mode_counts(fake):
    """Forward nodes sum per module to FlopCounterMode's counts of the forward, and all
    nodes to its total of the step. Its per-module backward counts are not compared:
    they are best-effort (a module stays open in its tracker from its output's gradient
    to its input's, over other modules' backward ops), where a backward kernel here
    belongs to the one module whose forward made its autograd node."""
    model = timm.create_model("resnet18", pretrained=False).train()
    x = torch.randn(2, 3, 32, 32)
    expected_forward, _ = flop_counter_by_module(model, lambda: model(x))
    _, expected_total = flop_counter_by_module(model, lambda: model(x).sum().backward())
    g, _ = capture_with_counts(fake, model, lambda: model(x).sum().backward())
    forward, total = flops_by_module(model, g.graph_exec.id, phase=None)
    assert total == expected_total > 0
    assert forward == expected_forward
    backward, _ = flops_by_module(model, g.graph_exec.id, phase="backward")
    assert forward[""] + backward[""] == total  # every counted node is the model's
    assert backward[""] > forward[""]  # gradients of inputs and of weights


def test_an_ops_counts_go_on_its_first_node_and_its_bytes_are_its_tensors_sizes(fake):
    model = torch.nn.Linear(8, 16)
    x = torch.randn(4, 8)
    g, launcher = capture_with_counts(fake, model, lambda: model(x), nodes_per_op=3)
    high = g.graph_exec.id << 32
    counts = capture.get_kernel_op_counts()
    [nodes] = [nodes for name, nodes, _ in launcher.launched if "addmm" in name]
    first, *others = (counts[high | node.local_id] for node in nodes)
    assert first["flops"] == 2 * 4 * 8 * 16
    # bias, input, transposed weight, output (float32)
    assert first["bytes"] == 4 * (16 + 4 * 8 + 8 * 16 + 4 * 16)
    assert others == [{"flops": 0, "bytes": 0}] * 2


def test_counts_reach_the_kernels_args_as_extra_annotation_items(fake, tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU())
    x = torch.randn(4, 8)
    g, launcher = capture_with_counts(fake, model, lambda: model(x))
    path = tmp_path / "annotations.json"
    capture.save_annotations(path)
    counts = capture.get_kernel_op_counts()
    saved = annotation_files.load_annotations(path)
    for node_id, items in capture.get_kernel_annotations().items():
        assert saved[node_id] == [*items, counts[node_id]]  # last: its keys win
    events = [
        kernel(100.0 + 10 * index, 5.0, node=g.graph_exec.id << 32 | node.local_id, name=name)
        for index, (name, [node], _) in enumerate(launcher.launched)
    ]
    trace = write_trace(tmp_path / "trace.json", events)
    out = tmp_path / "out.json"
    cgfast.annotate_file(trace, annotations=str(path), output=str(out))
    args = {
        e["args"]["graph node id"]: e["args"]
        for e in read_json(out)["traceEvents"]
        if e.get("cat") == "kernel"
    }
    addmm = next(
        g.graph_exec.id << 32 | nodes[0].local_id for name, nodes, _ in launcher.launched if "addmm" in name
    )
    assert args[addmm]["flops"] == str(2 * 4 * 8 * 16) and args[addmm]["module"] == "0"
    assert all(args[node_id]["bytes"] == str(c["bytes"]) for node_id, c in counts.items())


def test_without_flops_nothing_is_counted_and_the_file_is_as_before(fake, tmp_path):
    model = resnet18()
    x = torch.randn(1, 3, 32, 32)

    def forward():
        with torch.no_grad():
            model(x)

    files = {}
    for flops in (False, True):
        capture.clear_kernel_annotations()
        g, _ = capture_with_counts(fake, model, forward, flops=flops)
        files[flops] = tmp_path / f"flops-{flops}.json"
        capture.save_annotations(files[flops])
        high = g.graph_exec.id << 32
        files[flops, "by local id"] = {
            node_id - high: items
            for node_id, items in annotation_files.load_annotations(files[flops]).items()
        }
        assert runtime.count_mode is None and runtime.count_requests == []
    off, on = files[False, "by local id"], files[True, "by local id"]
    assert "flops" not in files[False].read_text() and "bytes" not in files[False].read_text()
    assert {local_id: items[:-1] for local_id, items in on.items() if items[:-1]} == off
    assert all(set(items[-1]) == {"flops", "bytes"} for items in on.values())
    assert json.loads(files[False].read_text())["annotations"]  # modules were named all the same


def test_count_kernels_puts_its_counts_on_its_first_node_and_an_op_inside_wins(fake):
    """What the Inductor toggle brackets each kernel with (Inductor's estimates)."""
    model = torch.nn.Linear(8, 16)
    x = torch.randn(4, 8)
    g = FakeCUDAGraph(fake)
    with capture.annotate_modules(model, flops=True), LaunchEachOp(fake), capturing(g):
        with capture.count_kernels(100, 200):
            triton = [fake.launch("triton_a"), fake.launch("triton_b")]
        with capture.count_kernels(7, 9):
            model(x)  # its addmm's own count wins on its node
        with capture.count_kernels(5, 6):
            pass  # no node: nothing
    high = g.graph_exec.id << 32
    counts = capture.get_kernel_op_counts()
    assert [counts[high | node.local_id] for node in triton] == [
        {"flops": 100, "bytes": 200},
        {"flops": 0, "bytes": 0},
    ]
    assert sum(c["flops"] for c in counts.values()) == 100 + 2 * 4 * 8 * 16
    assert len(counts) == 2 + 2  # the two launches, the linear's t and addmm


def test_a_higher_order_op_runs_uncounted_and_what_follows_is_counted(fake):
    class LaunchEachOpAndHigherOrderOp(LaunchEachOp):
        supports_higher_order_operators = True

    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    launcher = LaunchEachOpAndHigherOrderOp(fake)
    g = FakeCUDAGraph(fake)
    with capture.annotate_modules(model, flops=True), torch.no_grad(), launcher, capturing(g):
        y = torch.cond(x.sum() > 0, lambda t: t.relu(), lambda t: t.sin(), (x,))
        model(y)
    counts = capture.get_kernel_op_counts()
    [node] = [nodes[0] for name, nodes, _ in launcher.launched if name == "cond"]
    assert g.graph_exec.id << 32 | node.local_id not in counts
    assert sum(c["flops"] for c in counts.values()) == 2 * 2 * 4 * 4  # the addmm after it


def test_formulas_get_the_shapes_their_wrapper_would_give_them():
    """``formula_flops`` skips the shape wrapper's pytree round trip: for every formula
    torch registers, on the ops and arguments a model gives them, the same FLOPs as the
    registered (wrapped) formula; values it does not know go through the wrapper."""
    from torch.utils._pytree import tree_map
    from torch.utils.flop_counter import flop_registry, get_shape

    from cgfast.capture._op_counts import _shape_formulas, _shapes, formula_flops

    code, leaves, size = _shape_formulas()
    assert code is not None
    seen = []

    class Compare(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            formula = flop_registry.get(func._overloadpacket)
            if formula is not None:
                assert getattr(formula, "__code__", None) is code  # the quick path is taken
                assert _shapes((args, kwargs, out), leaves, size) == tree_map(get_shape, (args, kwargs, out))
                assert formula_flops(formula, args, kwargs, out) == formula(*args, **kwargs, out_val=out)
                seen.append(func._overloadpacket)
            return out

    config = transformers.LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4
    )
    llama = transformers.LlamaForCausalLM(config)
    conv = timm.create_model("resnet18", pretrained=False)
    with Compare():
        llama(torch.randint(0, 64, (2, 8))).logits.sum().backward()
        conv(torch.randn(2, 3, 32, 32)).sum().backward()
        torch.baddbmm(torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5))
        torch.bmm(torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    assert {"mm", "addmm", "bmm", "convolution", "convolution_backward", "baddbmm"} <= {
        packet.__name__ for packet in seen
    }
    # a torch.Size becomes a tuple, as pytree rebuilds it; an unknown value is not converted
    assert _shapes([torch.Size([2, 3]), {"a": torch.zeros(4)}], leaves, size) == [
        (2, 3),
        {"a": torch.Size([4])},
    ]

    class Odd(int):
        pass

    mm = flop_registry[torch.ops.aten.mm]
    a, b = torch.zeros(2, 3), torch.zeros(3, 5)
    assert formula_flops(mm, (a, b), {"unused": Odd(1)}, None) == mm(a, b, unused=Odd(1)) == 60
