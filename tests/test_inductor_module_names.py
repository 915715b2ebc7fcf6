"""``module`` names a submodule of the compiled root however the model is compiled:
a module, a bound method, a function reaching it through a global or a closure, an
``OptimizedModule`` wrapper, a nested ``torch.compile``, backward graphs."""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch._inductor import config  # noqa: E402
from torch._inductor.utils import fresh_cache, run_and_get_code  # noqa: E402

from cgfast.inductor import TOGGLE_KEY  # noqa: E402
from cgfast.inductor._annotations import split_source  # noqa: E402
from test_inductor_codegen import Model, all_brackets  # noqa: E402

pytestmark = pytest.mark.usefixtures("isolated_inductor_cache")


@pytest.fixture(scope="module")
def isolated_inductor_cache():
    with fresh_cache():
        yield
    torch._dynamo.reset()


@pytest.mark.parametrize(
    ("source", "split"),
    [
        ("L['self'].layers[0].proj", ("L['self']", ("layers", "0", "proj"))),
        ("L['args'][0].model.layers[1]", ("L['args'][0]", ("model", "layers", "1"))),
        ("L['kwargs']['net'].head", ("L['kwargs']['net']", ("head",))),
        ("L['self']._orig_mod.encoder", ("L['self']._orig_mod", ("encoder",))),
        ("L['self'].block._orig_mod.proj", ("L['self']", ("block", "_orig_mod", "proj"))),
        (
            "L['fn'].__closure__[0].cell_contents.linear",
            ("L['fn'].__closure__[0].cell_contents", ("linear",)),
        ),
        ("L['self']._modules['layers']._modules['3']", ("L['self']", ("layers", "3"))),
        ("G['model'].encoder", ("G['model']", ("encoder",))),
        ("L['args'][0]", ("L['args'][0]", ())),
        ("encoder.layers.0", ("", ("encoder", "layers", "0"))),
    ],
)
def test_source_splits_into_reference_and_child_path(source, split):
    assert split_source(source) == split


def _names(module: nn.Module) -> set:
    return {name for name, _ in module.named_modules()}


def _modules_of(found) -> list:
    """Every module name the brackets give, in ``module`` and in ``modules``."""
    names = []
    for bracket in found:
        if "module" in bracket.annotation:
            names.append(bracket.annotation["module"])
        names.extend(
            bracket.annotation.get("modules", "").split(" + ") if "modules" in bracket.annotation else []
        )
    return names


def _compiled_codes(fn, *args, backward=False):
    torch._dynamo.reset()
    with config.patch({TOGGLE_KEY: True}):
        if backward:
            _, codes = run_and_get_code(fn, *args)
        else:
            with torch.no_grad():
                _, codes = run_and_get_code(fn, *args)
    return codes


class Decorated(nn.Module):
    """A forward reached through a ``*args`` wrapper, as transformers decorates it:
    Dynamo then spells the root ``L['args'][0]``."""

    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.head = nn.Linear(4, 2)

    @staticmethod
    def _wrapped(forward):
        @functools.wraps(forward)
        def wrapper(*args, **kwargs):
            return forward(*args, **kwargs)

        return wrapper

    def forward(self, x):
        return self.head(self.model(x))


Decorated.forward = Decorated._wrapped(Decorated.forward)


def _ways_to_compile():
    torch.manual_seed(0)
    model = Decorated()
    closure_model = Decorated()

    def through_closure(x):
        return closure_model(x)

    nested = Decorated()
    nested.model = torch.compile(nested.model)
    return {
        "module": (model, torch.compile(model)),
        "bound method": (model, torch.compile(model.forward)),
        "function over a closure": (closure_model, torch.compile(through_closure)),
        "OptimizedModule of an OptimizedModule": (model, torch.compile(torch.compile(model))),
        "nested torch.compile": (nested, torch.compile(nested)),
    }


@pytest.mark.parametrize("way", list(_ways_to_compile()))
def test_every_module_name_is_a_submodule_of_the_root(way):
    root, compiled = _ways_to_compile()[way]
    found = all_brackets(_compiled_codes(compiled, torch.randn(4, 8)))
    names = _modules_of(found)
    assert set(names) <= _names(root), sorted(set(names) - _names(root))
    # every linear layer's matmul is attributed to that layer
    linears = {n for n, m in root.named_modules() if isinstance(m, nn.Linear)}
    assert linears <= set(names), sorted(linears - set(names))


def test_training_step_backward_names_are_submodules():
    torch.manual_seed(0)
    model = Decorated()

    def step(x):
        model(x).sum().backward()

    codes = _compiled_codes(torch.compile(step), torch.randn(4, 8), backward=True)
    backward = [c for c in codes if "tangents_1" in c]
    assert backward
    found = all_brackets(backward)
    names = _modules_of(found)
    assert names and set(names) <= _names(model), sorted(set(names) - _names(model))
    assert all(b.annotation["autograd_phase"] == "backward" for b in found)


def test_alike_graphs_under_different_modules_are_not_served_each_others_names():
    """The cache keys hash the graph's code, not its module stacks: the second of two
    graphs alike but for their modules must not get the first one's brackets."""
    torch.manual_seed(0)
    two = nn.ModuleDict({"first": Model(), "second": Model()})
    for part in ("first", "second"):
        found = all_brackets(_compiled_codes(torch.compile(two[part].forward), torch.randn(4, 8)))
        names = _modules_of(found)
        assert names and all(n.startswith(("encoder", "linear")) for n in names), names
    # the same module compiled through its parent: names carry the parent's path
    for part in ("first", "second"):

        def through_parent(x, part=part):
            return two[part](x)

        found = all_brackets(_compiled_codes(torch.compile(through_parent), torch.randn(4, 8)))
        names = _modules_of(found)
        assert names and all(n.startswith(part + ".") for n in names), names
