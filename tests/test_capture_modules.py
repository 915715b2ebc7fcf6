"""annotate_modules on the fake driver, with real timm and Hugging Face models running
on the CPU: every aten op the model runs adds a kernel node to the fake capture (a
dispatch mode), and the expected module of each node comes from an independent reading:
the innermost ``forward`` frame of a module on the Python stack when the op ran (and,
for backward ops, the module whose forward created the autograd node that runs them,
read by a node-creation hook the same way)."""

from __future__ import annotations

import os
import sys
import traceback

import pytest

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from cgfast import capture  # noqa: E402
from cgfast.capture import _module_calls, _patches  # noqa: E402
from cgfast.capture._runtime import runtime  # noqa: E402
from fake_graph_driver import FakeCUDAGraph, capturing  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
from model_modules import innermost_forward  # noqa: E402


class LaunchEachOp(TorchDispatchMode):
    """Every aten op launches a fake kernel named after it; remembers what each node's
    annotation must be."""

    def __init__(self, driver, model, prefix=None):
        super().__init__()
        self.driver = driver
        self.names = {}
        for name, module in model.named_modules():
            self.names[id(module)] = f"{prefix}.{name}" if prefix and name else (prefix or name)
        self.expected = {}  # fake node -> expected annotation (None: none)
        self.created_in = {}  # autograd node -> module whose forward created it

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        node = self.driver.launch(str(func))
        if node is not None:
            running = torch._C._current_autograd_node()
            if running is None:
                module = innermost_forward(self.names)
                self.expected[node] = {"module": module} if module is not None else None
            else:
                module = self.created_in.get(running)
                self.expected[node] = (
                    {"module": module, "autograd_phase": "backward"} if module is not None else None
                )
        return out

    def note_creation(self, autograd_node):
        if isinstance(autograd_node, torch._C._functions.AccumulateGrad):
            return
        module = innermost_forward(self.names)
        if module is not None:
            self.created_in[autograd_node] = module


def recorded(g, nodes):
    registry = capture.get_kernel_annotations()
    result = {}
    for node in nodes:
        annotations = registry.get(g.graph_exec.id << 32 | node.local_id)
        result[node] = annotations[0] if annotations else None
    return result


def capture_model(fake, model, inputs, *, backward=False, prefix=None, annotate=True, loss_of=None):
    launcher = LaunchEachOp(fake, model, prefix)
    g = FakeCUDAGraph(fake)
    handle = capture.annotate_modules(model, prefix=prefix) if annotate else None
    torch._C._autograd._push_node_creation_hook(launcher.note_creation)
    try:
        with capturing(g), launcher:
            out = model(inputs)
            if backward:
                (loss_of(out) if loss_of else out.float().sum()).backward()
    finally:
        torch._C._autograd._pop_node_creation_hook()
        if handle is not None:
            handle.remove()
    return g, launcher


@pytest.mark.parametrize(
    "name,shape",
    [("resnet50", (1, 3, 32, 32)), ("vit_small_patch16_224", (1, 3, 32, 32))],
)
def test_every_forward_node_gets_its_innermost_module(fake, name, shape):
    kwargs = {"img_size": 32} if name.startswith("vit") else {}
    model = timm.create_model(name, pretrained=False, **kwargs).eval()
    with torch.no_grad():
        g, launcher = capture_model(fake, model, torch.randn(shape))
    assert len(launcher.expected) > 100
    assert recorded(g, launcher.expected) == launcher.expected
    modules = {a["module"] for a in launcher.expected.values() if a}
    assert len(modules) > 50  # many distinct innermost modules, not one big scope


def hf_models():
    transformers = pytest.importorskip("transformers")
    small = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
    return {
        "llama": transformers.LlamaForCausalLM(
            transformers.LlamaConfig(**small, num_attention_heads=4, num_key_value_heads=2)
        ),
        "gpt2": transformers.GPT2LMHeadModel(
            transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64)
        ),
        "bert": transformers.BertModel(transformers.BertConfig(**small, num_attention_heads=4)),
    }


@pytest.mark.parametrize("name", ["llama", "gpt2", "bert"])
def test_hugging_face_models_every_node_gets_its_innermost_module(fake, name):
    """Hugging Face decoders and an encoder (random weights): their decorated forwards,
    attention functions called with the module, rotary embeddings under ``no_grad`` and
    ``GradientCheckpointingLayer.__call__`` all come through the module-call wrapper."""
    model = hf_models()[name].eval()
    with torch.no_grad():
        g, launcher = capture_model(fake, model, torch.randint(0, 128, (1, 8)))
    assert len(launcher.expected) > 40
    assert recorded(g, launcher.expected) == launcher.expected
    modules = {a["module"] for a in launcher.expected.values() if a}
    assert any(".0." in m and "att" in m for m in modules), modules  # a layer's attention


def test_hugging_face_training_step_backward_nodes_get_the_module_and_the_phase(fake):
    model = hf_models()["llama"].train()
    ids = torch.randint(0, 128, (1, 8))
    g, launcher = capture_model(fake, model, ids, backward=True, loss_of=lambda out: out.logits.float().sum())
    backward = [a for a in launcher.expected.values() if a and a.get("autograd_phase")]
    assert len(backward) > 40
    assert recorded(g, launcher.expected) == launcher.expected


@pytest.mark.parametrize("name", ["resnet50", "llama"])
def test_node_counts_read_through_the_extension_give_the_same_modules(native_fake, name):
    """As on the GPU: every module boundary's node count and the capture-end walk are
    native calls (through functions the extension resolved in a loaded library, here one
    forwarding to the fake), on a timm ResNet-50's forward and a Llama training step."""
    if name == "resnet50":
        model = timm.create_model(name, pretrained=False).eval()
        with torch.no_grad():
            g, launcher = capture_model(native_fake, model, torch.randn(1, 3, 32, 32))
    else:
        model = hf_models()[name].train()
        ids = torch.randint(0, 128, (1, 8))
        g, launcher = capture_model(
            native_fake, model, ids, backward=True, loss_of=lambda out: out.logits.float().sum()
        )
    assert len(launcher.expected) > 100
    assert recorded(g, launcher.expected) == launcher.expected
    assert native_fake.walks == 1 and "node_count" not in native_fake.calls  # all native


def test_backward_nodes_get_the_module_and_the_phase(fake):
    model = timm.create_model("resnet18", pretrained=False).train()
    g, launcher = capture_model(fake, model, torch.randn(2, 3, 32, 32), backward=True)
    got = recorded(g, launcher.expected)
    backward = {node: a for node, a in launcher.expected.items() if a and "autograd_phase" in a}
    assert len(backward) > 50
    assert {node: got[node] for node in backward} == backward
    assert got == launcher.expected


def test_prefix_names_the_root_and_prepends_to_every_name(fake):
    model = timm.create_model("resnet18", pretrained=False).eval()
    with torch.no_grad():
        g, launcher = capture_model(fake, model, torch.randn(1, 3, 32, 32), prefix="encoder")
    got = recorded(g, launcher.expected)
    assert got == launcher.expected
    names = {a["module"] for a in got.values() if a}
    assert "encoder.conv1" in names and "encoder.layer1.0.conv1" in names
    assert all(n == "encoder" or n.startswith("encoder.") for n in names)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)

    def forward(self, x, driver):
        driver.launch("block_head")
        with capture.mark_kernels({"name": "user", "module": "user-scope"}):
            driver.launch("in_user_scope_before_child")  # before a child: still the user's
            y = self.inner(x)
            driver.launch("in_user_scope")
        return y


class Root(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Block()

    def forward(self, x, driver):
        driver.launch("root_head")
        return self.block(x, driver)


def test_mark_kernels_composes_with_module_scopes_innermost_winning(fake):
    model = Root()
    g = FakeCUDAGraph(fake)
    with capture.annotate_modules(model), torch.no_grad(), capturing(g):
        with capture.mark_kernels({"name": "outer", "step": 1}):
            model(torch.randn(2, 4), fake)
        nodes = {node.launch.name: node for node in g.template.nodes if node.launch}
    registry = capture.get_kernel_annotations()
    got = {name: registry[g.graph_exec.id << 32 | node.local_id][0] for name, node in nodes.items()}
    assert got["root_head"] == {"module": "", "name": "outer", "step": 1}
    assert got["block_head"] == {"module": "block", "name": "outer", "step": 1}
    assert got["in_user_scope"] == {"module": "user-scope", "name": "user", "step": 1}
    assert got["in_user_scope_before_child"] == {"module": "user-scope", "name": "user", "step": 1}


def test_outside_a_capture_hooks_ask_no_driver(fake):
    model = timm.create_model("resnet18", pretrained=False).eval()
    with capture.annotate_modules(model), torch.no_grad():
        fake.calls.clear()  # (making the handle checks once for a capture under way)
        model(torch.randn(1, 3, 32, 32))
        model(torch.randn(1, 3, 32, 32))
    assert fake.calls == {}
    assert len(capture.get_kernel_annotations()) == 0


def test_module_calls_are_wrapped_while_a_handle_is_active_and_work_only_in_captures(fake):
    from torch.nn.modules import module as nn_module

    def global_hooks():
        return len(nn_module._global_forward_pre_hooks) + len(nn_module._global_forward_hooks)

    torch_call = torch.nn.Module.__dict__["__call__"]
    before = global_hooks()
    model = torch.nn.Linear(2, 2)
    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append(global_hooks())
            fake.launch("probe")
            return model(x)

    probe = Probe()
    with capture.annotate_modules(probe):
        assert torch.nn.Module.__dict__["__call__"] is not torch_call
        with torch.no_grad():
            calls = dict(fake.calls)
            probe(torch.zeros(2))
            assert fake.calls == calls  # outside a capture: a flag check, no driver query
            with capturing(FakeCUDAGraph(fake)):
                probe(torch.zeros(2))
    assert torch.nn.Module.__dict__["__call__"] is torch_call
    # no global hook at any time: they would send every module call down torch's slow path
    assert seen == [before, before]
    assert [a[0]["module"] for a in capture.get_kernel_annotations().values()] == [""]


class Placeholders(torch.nn.Module):
    """The placeholders a timm model is full of, and one of each that does launch work."""

    def __init__(self):
        super().__init__()
        self.identity = torch.nn.Identity()
        self.eval_dropout = torch.nn.Dropout(0.5)
        self.zero_dropout = torch.nn.Dropout(0.0)
        self.dropout = torch.nn.Dropout(0.5)
        self.hooked = torch.nn.Identity()

    def forward(self, x):
        return self.hooked(self.dropout(self.zero_dropout(self.eval_dropout(self.identity(x)))))


def test_placeholder_calls_that_cannot_launch_are_not_bracketed(fake, monkeypatch):
    model = Placeholders().train()
    model.eval_dropout.eval()
    hook_nodes = []
    model.hooked.register_forward_hook(
        lambda module, args, output: hook_nodes.append(fake.launch("from_hook"))
    )
    bracketed = []
    position = _module_calls._position
    monkeypatch.setattr(_module_calls, "_position", lambda backend: bracketed.append(1) or position(backend))
    with torch.no_grad():
        g, launcher = capture_model(fake, model, torch.randn(64))
    # identity, eval_dropout and zero_dropout return their input: no node counts around them
    assert len(bracketed) == 3  # the root, the training dropout with p > 0, the hooked identity
    assert {a["module"] for a in launcher.expected.values() if a} == {"dropout"}
    assert recorded(g, launcher.expected) == launcher.expected
    # a module's own hooks run inside its call: what they launch is the module's
    assert recorded(g, hook_nodes) == {hook_nodes[0]: {"module": "hooked"}}


def test_a_forward_that_raises_inside_a_capture_leaves_no_open_module(fake):
    class Fails(torch.nn.Module):
        def forward(self, x):
            fake.launch("before the error")
            raise ValueError("boom")

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fails = Fails()

        def forward(self, x):
            try:
                self.fails(x)
            except ValueError:
                pass
            fake.launch("after")
            return x

    model = Outer()
    with capture.annotate_modules(model):
        g = FakeCUDAGraph(fake)
        with capturing(g):
            model(torch.zeros(1))
    registry = capture.get_kernel_annotations()
    names = {node.launch.name: node for node in g.graph_exec.graph.nodes}
    high = g.graph_exec.id << 32
    assert registry[high | names["before the error"].local_id] == [{"module": "fails"}]
    assert registry[high | names["after"].local_id] == [{"module": ""}]


def test_make_graphed_callables_accepts_an_annotated_model(fake):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    with capture.annotate_modules(model):
        hooked = [m for m in model.modules() if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks]
        assert hooked == []


def test_bad_input(fake):
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        capture.annotate_modules(lambda x: x)
    model = Root()
    handle = capture.annotate_modules(model)
    with pytest.raises(ValueError, match=r"'block'.*already annotated"):
        capture.annotate_modules(model.block)
    with pytest.raises(ValueError, match="already annotated"):
        capture.annotate_modules(model)
    handle.remove()
    handle.remove()  # harmless
    with capture.annotate_modules(model.block):  # free again
        pass


def test_handles_restore_the_annotation_switch(fake):
    assert not capture.annotations_enabled()
    first = capture.annotate_modules(torch.nn.Linear(2, 2))
    second = capture.annotate_modules(torch.nn.Linear(2, 2))
    assert capture.annotations_enabled()
    first.remove()
    assert capture.annotations_enabled()
    second.remove()
    assert not capture.annotations_enabled()
    capture.enable_annotations()
    capture.annotate_modules(torch.nn.Linear(2, 2)).remove()
    assert capture.annotations_enabled()


def test_annotations_stay_on_while_anything_holds_them(fake):
    """The switch counts what holds it on: a block that ends while a handle is active
    leaves it on for the handle, whatever order they end in."""
    block = capture.recording()
    block.__enter__()
    handle = capture.annotate_modules(torch.nn.Linear(2, 2))
    block.__exit__(None, None, None)
    assert capture.annotations_enabled()
    handle.remove()
    assert not capture.annotations_enabled()
    # disable_annotations() stops recording inside a block too, until something new holds
    with capture.recording():
        capture.disable_annotations()
        assert not capture.annotations_enabled()
        with capture.recording():
            assert capture.annotations_enabled()
        assert not capture.annotations_enabled()
    assert not capture.annotations_enabled()
    with capture.recording():
        capture.enable_annotations()
    assert capture.annotations_enabled()


def test_a_forward_that_raises_leaves_no_open_scope(fake):
    class Failing(torch.nn.Module):
        def forward(self, x):
            fake.launch("before_failure")
            raise ValueError("boom")

    model = torch.nn.Sequential(torch.nn.Identity(), Failing())
    g = FakeCUDAGraph(fake)
    with capture.annotate_modules(model):
        with pytest.raises(ValueError), capturing(g):
            model(torch.zeros(1))
        assert _module_calls.open_frames() == []
    assert runtime.recorder.has_pending() is False


class ScopedBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Linear(4, 4)

    def forward(self, x):
        with capture.mark_kernels({"name": "user", "layer": 1}, backward=True):
            return torch.relu(self.inner(x))


def backward_ops(fake, g, launcher):
    """Recorded annotations of the nodes backward ops added, by the autograd node that ran them."""
    got = recorded(g, launcher.expected)
    return [
        (node.launch.name, got[node])
        for node in g.template.nodes
        if node.launch and node in launcher.backward
    ]


class Launcher(LaunchEachOp):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.backward = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = len(self.driver.current().capture.nodes)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        running = torch._C._current_autograd_node()
        if running is not None and len(self.driver.current().capture.nodes) > before:
            self.backward[self.driver.current().capture.nodes[-1]] = type(running).__name__
        return out


def capture_step(fake, model, x, annotate):
    launcher = Launcher(fake, model)
    g = FakeCUDAGraph(fake, keep_graph=True)
    handle = capture.annotate_modules(model) if annotate else None
    capture.enable_annotations()
    try:
        with capturing(g), launcher:
            model(x).sum().backward()
    finally:
        if handle is not None:
            handle.remove()
    g.instantiate()
    return g, launcher


def test_mark_kernels_backward_annotates_the_backward_of_its_ops(fake):
    model = torch.nn.Sequential(ScopedBlock())
    g, launcher = capture_step(fake, model, torch.randn(2, 4), annotate=False)
    by_node = {}
    got = recorded(g, launcher.backward)
    for node, autograd_node in launcher.backward.items():
        by_node.setdefault(autograd_node, set()).add(repr(got[node]))
    user = repr({"name": "user", "layer": 1, "autograd_phase": "backward"})
    assert by_node["ReluBackward0"] == {user}
    assert by_node["AddmmBackward0"] == {user}
    assert by_node["SumBackward0"] == {"None"}  # made outside the scope
    forward = [a for node, a in recorded(g, launcher.expected).items() if node not in launcher.backward]
    assert {"name": "user", "layer": 1} in forward


def test_backward_of_a_user_scope_inside_a_module_carries_both(fake):
    model = torch.nn.Sequential(ScopedBlock())
    g, launcher = capture_step(fake, model, torch.randn(2, 4), annotate=True)
    got = recorded(g, launcher.backward)
    by_node = {}
    for node, autograd_node in launcher.backward.items():
        by_node.setdefault(autograd_node, set()).add(repr(got[node]))
    assert by_node["ReluBackward0"] == {
        repr({"name": "user", "layer": 1, "autograd_phase": "backward", "module": "0"})
    }
    assert by_node["AddmmBackward0"] == {
        repr({"name": "user", "layer": 1, "autograd_phase": "backward", "module": "0.inner"})
    }


def test_a_capture_that_ends_inside_a_forward_leaves_nothing_open(fake):
    g = FakeCUDAGraph(fake)
    stream = fake.new_stream()

    class EndsTheCapture(torch.nn.Module):
        def forward(self, x):
            fake.launch("last")
            g.capture_end()
            return x

    model = torch.nn.Sequential(EndsTheCapture())
    with capture.annotate_modules(model), fake.use(stream):
        g.capture_begin()
        fake.launch("first")
        model(torch.zeros(1))  # its span began in the capture; its end must not read the graph
    assert _module_calls.open_frames() == [] and not runtime.recorder.has_pending()
    assert fake.calls.get("node_count", 0) == 2  # one per span start, none after the end


class TwoLines(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)  # LINE-A
        return torch.relu(y)  # LINE-B


def line_of(marker):
    import inspect

    source, first = inspect.getsourcelines(TwoLines.forward)
    return first + next(i for i, text in enumerate(source) if marker in text)


def test_stacks_name_the_line_that_launched_each_node(fake):
    model = TwoLines()
    launcher = LaunchEachOp(fake, model)
    g = FakeCUDAGraph(fake)
    x = torch.randn(2, 4)
    # the launcher is under the stack recorder, which a capture's begin puts on top
    with capture.annotate_modules(model, stacks=True), torch.no_grad(), launcher, capturing(g):
        model(x)
        launched_here = sys._getframe().f_lineno - 1
    stacks = capture.get_kernel_stacks()
    assert len(stacks) == len(launcher.expected) > 2
    innermost = {}
    for node in launcher.expected:
        frames = stacks[g.graph_exec.id << 32 | node.local_id]
        innermost.setdefault(frames[0], set()).add(node.launch.name)
        assert frames[1] == f"{__file__}:{launched_here}:test_stacks_name_the_line_that_launched_each_node"
        assert not any("/torch/" in f or "/cgfast/" in f for f in frames)
    a = f"{__file__}:{line_of('LINE-A')}:forward"
    b = f"{__file__}:{line_of('LINE-B')}:forward"
    assert set(innermost) == {a, b}
    assert innermost[b] == {"aten.relu.default"}


class Nested(torch.nn.Module):
    """``depth`` levels, each a module whose forward launches, descends through a helper
    of this file and launches again: two user frames a level."""

    def __init__(self, depth):
        super().__init__()
        self.inner = Nested(depth - 1) if depth > 1 else None

    def forward(self, x):
        x = x + 1
        if self.inner is not None:
            x = descend(self.inner, x)
        return x * 2


def descend(module, x):
    return module(x)


class FullWalk(LaunchEachOp):
    """Also remembers, for each node, the user frames of a walk over every frame at its
    launch (this one's own and the stack recorder's left out)."""

    def __init__(self, driver, model):
        super().__init__(driver, model)
        self.walked = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        node = self.driver.launch(str(func))
        frames = [
            f"{frame.filename}:{frame.lineno}:{frame.name}"
            for frame in reversed(traceback.extract_stack(sys._getframe(1)))
            if not frame.filename.startswith("<frozen")
            and "/torch/" not in frame.filename
            and "/cgfast/" not in frame.filename
        ]
        self.walked[node] = frames[:64]
        return out


def test_stacks_of_deep_module_trees_are_those_of_a_walk_over_every_frame(fake):
    # 40 levels: about 200 frames and 80 user frames at the innermost op (64 are kept)
    model = Nested(40)
    launcher = FullWalk(fake, model)
    g = FakeCUDAGraph(fake)
    x = torch.zeros(2)
    with capture.annotate_modules(model, stacks=True), torch.no_grad(), launcher, capturing(g):
        model(x)
    stacks = capture.get_kernel_stacks()
    assert len(launcher.walked) == 80
    for node, walked in launcher.walked.items():
        assert stacks[g.graph_exec.id << 32 | node.local_id] == walked
    assert max(len(walked) for walked in launcher.walked.values()) == 64
    assert runtime.stack_outer_frames == {}


def test_stacks_are_off_by_default_and_the_filter_is_configurable(fake, tmp_path):
    model = TwoLines()
    launcher = LaunchEachOp(fake, model)
    with launcher, torch.no_grad():
        with capture.annotate_modules(model), capturing(FakeCUDAGraph(fake)):
            model(torch.randn(2, 4))
        assert capture.get_kernel_stacks() == {}
        here = os.path.dirname(os.path.abspath(__file__))
        with capture.recording(stacks=True, stack_filter_paths=[here]), capturing(FakeCUDAGraph(fake)):
            model(torch.randn(2, 4))
    frames = [f for stack in capture.get_kernel_stacks().values() for f in stack]
    assert frames and not any(f.startswith(here) for f in frames)
    assert any("/torch/" in f for f in frames)  # torch's frames are no longer filtered
    assert runtime.stack_mode is None and runtime.stack_requests == []


def test_saved_stacks_round_trip(fake, tmp_path):
    model = TwoLines()
    launcher = LaunchEachOp(fake, model)
    with (
        capture.annotate_modules(model, stacks=True),
        torch.no_grad(),
        launcher,
        capturing(FakeCUDAGraph(fake)),
    ):
        model(torch.randn(2, 4))
    path = tmp_path / "annotations.json"
    capture.save_annotations(path)
    from cgfast import annotations as annotation_files

    assert annotation_files.load_stacks(path) == capture.get_kernel_stacks()
    assert annotation_files.load_annotations(path) == dict(capture.get_kernel_annotations())


def test_a_failing_hook_update_does_not_break_the_capture(fake, monkeypatch, caplog):
    def broken():
        raise RuntimeError("hook update failed")

    model = TwoLines()
    g = FakeCUDAGraph(fake)
    with capture.annotate_modules(model):
        # what runs after each capture's begin and end (as after a handle's change)
        monkeypatch.setattr(_patches, "_sync_stack_mode", broken)
        with torch.no_grad(), LaunchEachOp(fake, model), capturing(g):
            model(torch.zeros(2, 4))
        monkeypatch.undo()
    assert g.graph_exec is not None
    assert "updating annotation hooks" in caplog.text
    assert {a[0]["module"] for a in capture.get_kernel_annotations().values()} == {"lin", ""}


def test_a_child_graph_a_module_adds_gets_its_name_on_the_body(fake):
    class AddsChildGraph(torch.nn.Module):
        def forward(self, x):
            fake.launch("own")
            fake.child_graph(["body a", "body b"])
            return x

    model = torch.nn.Sequential(torch.nn.Identity(), AddsChildGraph())
    with capture.annotate_modules(model, prefix="net"):
        g = FakeCUDAGraph(fake)
        with capturing(g):
            fake.launch("before")
            model(torch.zeros(1))
    template = next(node for node in g.graph_exec.graph.nodes if node.body is not None)
    local = fake.exec_local_ids(template.graph)
    high = g.graph_exec.id << 32
    registry = capture.get_kernel_annotations()
    own = next(node for node in template.graph.nodes if node.launch and node.launch.name == "own")
    assert registry[high | own.local_id] == [{"module": "net.1"}]
    assert [registry.get(high | local[node]) for node in template.body.nodes] == [[{"module": "net.1"}]] * 2
    assert len(registry) == 3  # "before" ran outside the model


def test_compiled_modules_take_the_plain_call_and_are_not_recompiled_inside_captures():
    """torch.compile traces module calls through cgfast's Module.__call__ wrapper: its
    graphs must keep no guard on the capture flag, or every capture would recompile them
    (and trace the hooks' driver queries)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
    x = torch.randn(2, 4)
    with capture.annotate_modules(model):
        compiled = torch.compile(model, backend="eager")
        expected = compiled(x)
        traced = counters["stats"]["calls_captured"]
        assert traced > 0
        runtime.module_calls_record = True
        try:
            assert torch.equal(compiled(x), expected)
        finally:
            runtime.module_calls_record = False
        assert counters["stats"]["calls_captured"] == traced
        assert counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()
