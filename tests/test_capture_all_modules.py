"""annotate_all_modules on the fake driver with real timm and Hugging Face models on the
CPU: with no handle on the model, every node gets what ``annotate_modules(model)``
records (the same independent reading as tests/test_capture_modules.py: the innermost
module ``forward`` on the Python stack when the op ran)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")

from cgfast import capture  # noqa: E402
from cgfast.capture import _patches  # noqa: E402
from cgfast.capture._module_calls import module_call  # noqa: E402
from cgfast.capture._runtime import runtime  # noqa: E402
from fake_graph_driver import FakeCUDAGraph, capturing  # noqa: E402
from test_capture_modules import LaunchEachOp, hf_models, recorded  # noqa: E402


@pytest.fixture
def naming():
    handle = capture.annotate_all_modules()
    yield handle
    handle.remove()


def capture_call(fake, model, call, *, prefix=None, backward=False):
    """Capture ``call()`` with every op a fake kernel; the expected names are
    ``model.named_modules()``'s (``prefix.`` before them)."""
    launcher = LaunchEachOp(fake, model, prefix)
    g = FakeCUDAGraph(fake)
    torch._C._autograd._push_node_creation_hook(launcher.note_creation)
    try:
        with capturing(g), launcher:
            out = call()
            if backward:
                out.logits.float().sum().backward() if hasattr(
                    out, "logits"
                ) else out.float().sum().backward()
    finally:
        torch._C._autograd._pop_node_creation_hook()
    return g, launcher


def test_module_calls_are_not_wrapped_until_a_capture(fake, naming):
    assert torch.nn.Module.__dict__["__call__"] is not module_call
    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    g, launcher = capture_call(fake, model, lambda: model(x))
    assert torch.nn.Module.__dict__["__call__"] is module_call
    assert (
        recorded(g, launcher.expected) == launcher.expected == {n: {"module": ""} for n in launcher.expected}
    )
    naming.remove()
    assert torch.nn.Module.__dict__["__call__"] is not module_call
    assert runtime.modules == {} and runtime.module_naming is None


@pytest.mark.parametrize("name", ["llama", "gpt2", "bert"])
def test_hugging_face_models_are_named_without_a_handle(fake, naming, name):
    model = hf_models()[name].eval()
    ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        g, launcher = capture_call(fake, model, lambda: model(ids))
    assert len(launcher.expected) > 40
    assert recorded(g, launcher.expected) == launcher.expected


def test_the_same_as_annotate_modules_on_a_timm_model(fake):
    model = timm.create_model("resnet18", pretrained=False).eval()
    x = torch.randn(1, 3, 32, 32)
    results = []
    for handle in (lambda: capture.annotate_modules(model), capture.annotate_all_modules):
        capture.clear_kernel_annotations()
        with handle(), torch.no_grad():
            g, launcher = capture_call(fake, model, lambda: model(x))
        results.append(sorted(map(str, recorded(g, launcher.expected).values())))
        assert recorded(g, launcher.expected) == launcher.expected
    assert results[0] == results[1] and len(results[0]) > 50


def test_backward_nodes_get_the_module_and_the_phase(fake, naming):
    model = hf_models()["llama"].train()
    ids = torch.randint(0, 128, (1, 8))
    g, launcher = capture_call(fake, model, lambda: model(ids), backward=True)
    backward = [a for a in launcher.expected.values() if a and a.get("autograd_phase")]
    assert len(backward) > 40
    assert recorded(g, launcher.expected) == launcher.expected


class Engine(torch.nn.Module):
    """An engine module whose forward begins before the capture it makes, as the graph
    wrappers of serving engines do: its model is named from the engine."""

    def __init__(self, fake):
        super().__init__()
        self.fake = fake
        self.model = timm.create_model("resnet18", pretrained=False).eval()
        self.graph = FakeCUDAGraph(fake)

    def forward(self, x, launcher):
        with capturing(self.graph), launcher:
            return self.model(x)


def test_a_model_is_named_from_the_outermost_module_call_begun_before_the_capture(fake, naming):
    engine = Engine(fake)
    launcher = LaunchEachOp(fake, engine)
    with torch.no_grad():
        engine(torch.randn(1, 3, 32, 32), launcher)
    got = recorded(engine.graph, launcher.expected)
    assert got == launcher.expected
    names = {a["module"] for a in got.values() if a}
    assert "model.conv1" in names and "model.layer1.0.conv1" in names


def test_annotate_modules_takes_precedence(fake, naming):
    model = timm.create_model("resnet18", pretrained=False).eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        capture_call(fake, model, lambda: model(x))  # registers the model without a prefix
        with capture.annotate_modules(model, prefix="encoder"):
            g, launcher = capture_call(fake, model, lambda: model(x), prefix="encoder")
        assert recorded(g, launcher.expected) == launcher.expected
        # once the handle is gone, its modules are named without it again
        g, launcher = capture_call(fake, model, lambda: model(x))
    assert recorded(g, launcher.expected) == launcher.expected


def test_handles_share_one_naming_until_the_last_is_removed(fake, naming):
    with pytest.raises(ValueError, match="is active already: another key or backward"):
        capture.annotate_all_modules(key="layer")
    second = capture.annotate_all_modules()  # as a program does under cgfast run
    naming.remove()
    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    g, launcher = capture_call(fake, model, lambda: model(x))
    assert recorded(g, launcher.expected) == launcher.expected  # the second still names
    second.remove()
    assert runtime.module_naming is None and runtime.modules == {}


def test_a_compiled_module_is_named_as_the_module_it_compiles(fake, naming):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    compiled = torch.compile(model, backend="eager")
    naming = runtime.module_naming
    entries = naming.entry_for(compiled)
    assert entries == (naming, {"module": ""}, {"module": "", "autograd_phase": "backward"}, False)
    assert runtime.modules[model[0]][1] == {"module": "0"}
    assert runtime.modules[model][1] == {"module": ""}


def test_nothing_is_recorded_after_remove(fake):
    handle = capture.annotate_all_modules()
    handle.remove()
    model = torch.nn.Linear(4, 4)
    capture.disable_annotations()
    g, launcher = capture_call(fake, model, lambda: model(torch.randn(2, 4)))
    assert all(v is None for v in recorded(g, launcher.expected).values())
    assert not _patches._applied(_patches.MODULE_CALLS)


def test_captures_of_compiled_code_leave_module_calls_alone(fake, naming):
    """Inductor's cudagraphs (``compiled_code_capture``) call no module: Module.__call__
    stays torch's through them, as replacing it once Dynamo traced it can recompile;
    an eager capture after them wraps it."""
    from cgfast.capture._recording import compiled_code_capture

    with compiled_code_capture(), capturing(FakeCUDAGraph(fake)):
        assert torch.nn.Module.__dict__["__call__"] is not module_call
    model = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4)
    g, launcher = capture_call(fake, model, lambda: model(x))
    assert torch.nn.Module.__dict__["__call__"] is module_call
    assert recorded(g, launcher.expected) == launcher.expected
