"""The launch brackets Inductor generates with the toggle on, compiled for the CPU."""

from __future__ import annotations

import ast
import dataclasses
import re

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402
from torch._inductor import config  # noqa: E402
from torch._inductor.codecache import PyCodeCache  # noqa: E402
from torch._inductor.utils import fresh_cache, run_and_get_code  # noqa: E402

import cgfast.inductor  # noqa: E402,F401  (registers the toggle)
from cgfast.inductor import CODEGEN_VERSION_KEY, TOGGLE_KEY  # noqa: E402
from cgfast.inductor._annotations import GraphOrigins  # noqa: E402

ON = {TOGGLE_KEY: True}
IMPORT = "from cgfast.capture import mark_kernels as _mark_kernels"
OPEN = re.compile(r"^(\s*)_annotation_ctx = _mark_kernels\((\{.*\})\)$")
ENTER = "_annotation_ctx.__enter__()"
EXIT = "_annotation_ctx.__exit__(None, None, None)"


@pytest.fixture(scope="module", autouse=True)
def isolated_inductor_cache():
    """A cache directory of this module's own, so a warm cache from an earlier run
    serves nothing and the cache-hit counts below are this module's."""
    with fresh_cache():
        yield
    torch._dynamo.reset()


@dataclasses.dataclass
class Bracket:
    annotation: dict
    body: list  # the lines between __enter__ and __exit__


def brackets(code: str) -> list:
    """Every bracket of a generated module, checking that each is exactly the
    assignment, ``__enter__``, launch lines and ``__exit__``, with no nesting."""
    found, lines, i = [], code.splitlines(), 0
    while i < len(lines):
        opening = OPEN.match(lines[i])
        if opening is None:
            assert "_annotation_ctx" not in lines[i], f"stray line {i}: {lines[i]}"
            i += 1
            continue
        indent = opening.group(1)
        assert lines[i + 1] == indent + ENTER, lines[i : i + 2]
        end = i + 2
        while lines[end] != indent + EXIT:
            assert "_annotation_ctx" not in lines[end], f"nested bracket at line {end}"
            end += 1
        body = [line.strip() for line in lines[i + 2 : end] if not line.strip().startswith("#")]
        assert body, f"empty bracket at line {i}"
        annotation = ast.literal_eval(opening.group(2))
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in annotation.items())
        found.append(Bracket(annotation, body))
        i = end + 1
    return found


def all_brackets(codes) -> list:
    return [b for code in codes for b in brackets(code)]


def launching(found, call: str) -> list:
    return [b for b in found if any(call in line for line in b.body)]


class FeedForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear1 = nn.Linear(8, 16)
        self.linear2 = nn.Linear(16, 8)

    def forward(self, x):
        with torch.fx.traceback.annotate({"component": "ffn"}):
            return self.linear2(torch.relu(self.linear1(x)))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([FeedForward(), FeedForward()])

    def forward(self, x):
        for layer in self.layers:
            x = x + layer(x)
        return x


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = Encoder()
        self.linear = nn.Linear(8, 4)

    def forward(self, x):
        return self.linear(self.encoder(x))


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return Model()


@pytest.fixture(scope="module")
def inference_code(model):
    x = torch.randn(4, 8)
    with torch.no_grad(), config.patch(ON):
        _, (code,) = run_and_get_code(torch.compile(model), x)
    return code


@pytest.fixture(scope="module")
def training_codes(model):
    x = torch.randn(4, 8)

    def step(x):
        model(x).sum().backward()

    with config.patch(ON):
        _, codes = run_and_get_code(torch.compile(step), x)
    backward = [c for c in codes if "tangents_1" in c]
    forward = [c for c in codes if "tangents_1" not in c]
    assert len(backward) == 1 and len(forward) == 1
    return forward[0], backward[0]


def test_toggle_off_generates_plain_code(model, inference_code):
    with torch.no_grad():
        _, (plain,) = run_and_get_code(torch.compile(model), torch.randn(4, 8))
    assert "_mark_kernels" not in plain and "_annotation_ctx" not in plain

    def without_brackets(code):
        return [
            line
            for line in code.splitlines()
            if "_annotation_ctx" not in line and line != IMPORT and not line.startswith("# AOT ID")
        ]

    assert without_brackets(inference_code) == without_brackets(plain)
    assert inference_code.count(IMPORT) == 1


def test_add_of_a_function():
    _, (code,) = _compile_on(lambda x: x + 1, torch.randn(8))
    (only,) = brackets(code)
    assert only.annotation == {"name": "add"}
    assert any(line.startswith("cpp_fused_add") for line in only.body)


def test_every_launch_is_bracketed(inference_code):
    found = brackets(inference_code)
    launch_lines = [
        line.strip()
        for line in inference_code.split("def call(", 1)[1].splitlines()
        if re.match(r"\s*(cpp_fused_\w+|extern_kernels\.\w+)\(", line)
    ]
    assert sorted(launch_lines) == sorted(line for b in found for line in b.body if line in launch_lines)
    assert len(found) == len(launch_lines) == 9


def test_extern_addmm_is_named_for_its_module(inference_code):
    addmms = launching(brackets(inference_code), "extern_kernels.addmm(")
    assert [b.annotation["module"] for b in addmms] == [
        "encoder.layers.0.linear1",
        "encoder.layers.0.linear2",
        "encoder.layers.1.linear1",
        "encoder.layers.1.linear2",
        "linear",
    ]
    assert all(re.fullmatch(r"addmm(_\d+)?", b.annotation["name"]) for b in addmms)


def test_top_level_linear_is_module_linear(inference_code):
    (final,) = [b for b in brackets(inference_code) if b.annotation.get("module") == "linear"]
    assert final.annotation == {"name": "addmm_4", "module": "linear"}


def test_user_annotations_reach_kernels_inside_the_region_only(inference_code):
    found = brackets(inference_code)
    inside = [b for b in found if b.annotation.get("module", "").startswith("encoder.layers.")]
    outside = [b for b in found if b not in inside]
    assert len(inside) == 6 and all(b.annotation["component"] == "ffn" for b in inside)
    assert outside and all("component" not in b.annotation for b in outside)


def test_pointwise_kernels_name_their_nodes_and_module(inference_code):
    found = brackets(inference_code)
    relus = [b for b in found if "relu" in b.annotation["name"]]
    assert [(b.annotation["name"], b.annotation["module"]) for b in relus] == [
        ("relu", "encoder.layers.0"),
        ("relu_1", "encoder.layers.1"),
    ]
    residuals = [b for b in found if re.fullmatch(r"add(_\d+)?", b.annotation["name"])]
    assert [b.annotation for b in residuals] == [
        {"name": "add", "module": "encoder"},
        {"name": "add_1", "module": "encoder"},
    ]


def test_fused_kernel_joins_its_nodes_in_graph_order():
    class Scaled(nn.Module):
        def forward(self, x):
            return torch.relu(x * 2) + 1

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = Scaled()

        def forward(self, x):
            return self.block(x)

    _, (code,) = _compile_on(Outer(), torch.randn(8))
    (fused,) = brackets(code)
    assert fused.annotation == {"name": "mul + relu + add", "module": "block"}


def test_extern_mm_and_fallback_op():
    @torch.library.custom_op("cgfast_test::double", mutates_args=())
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @double.register_fake
    def _(x):
        return torch.empty_like(x)

    _, (code,) = _compile_on(lambda a, b: double(a @ b).sin(), torch.randn(4, 4), torch.randn(4, 4))
    found = brackets(code)
    assert [b.annotation["name"] for b in found] == ["mm", "double", "sin"]
    assert launching(found, "extern_kernels.mm(")[0].annotation == {"name": "mm"}
    assert launching(found, "torch.ops.cgfast_test.double.default(")[0].annotation == {"name": "double"}


def test_a_fallback_that_writes_its_own_launch_line():
    def dropout_like(x):
        y = x * 2
        y.bernoulli_(0.5)
        return y + 1

    with config.patch(fallback_random=True):
        _, (code,) = _compile_on(dropout_like, torch.rand(8))
    found = brackets(code)
    assert len(launching(found, "torch.ops.aten.bernoulli_.float(")) == 1
    assert sum(line.count(".bernoulli_.") for line in code.splitlines()) == 1


def test_control_flow_subgraphs_are_bracketed_with_their_own_nodes():
    def branches(p, x):
        return torch.cond(p, lambda x: x.sin() + 1, lambda x: x.cos() * 2, (x,))

    _, (code,) = _compile_on(branches, torch.tensor(True), torch.randn(4))
    assert sorted(b.annotation["name"] for b in brackets(code)) == ["cos + mul", "sin + add"]
    assert code.count(IMPORT) == 1


def test_training_step_backward_kernels_carry_the_phase(training_codes):
    forward, backward = training_codes
    assert all("autograd_phase" not in b.annotation for b in brackets(forward))
    found = brackets(backward)
    assert found and all(b.annotation["autograd_phase"] == "backward" for b in found)
    grads = {b.annotation.get("module") for b in launching(found, "extern_kernels.mm(")}
    assert {"linear", "encoder.layers.1.linear2", "encoder.layers.0.linear1"} <= grads
    ffn = [b for b in found if b.annotation.get("module", "").startswith("encoder.layers.")]
    assert ffn and all(b.annotation["component"] == "ffn" for b in ffn)


def test_options_argument_turns_annotations_on_for_one_compile():
    assert config.triton.cudagraph_kernel_annotations is False

    def fn(x):
        return torch.tanh(x) - 3

    compiled = torch.compile(fn, options={TOGGLE_KEY: True})
    _, (code,) = run_and_get_code(compiled, torch.randn(8))
    assert [b.annotation["name"] for b in brackets(code)] == ["tanh + sub"]
    assert config.triton.cudagraph_kernel_annotations is False


def test_a_label_that_cannot_be_built_does_not_fail_the_compile(monkeypatch, caplog):
    def broken(self, operations, kernel_name):
        raise RuntimeError("no origins today")

    monkeypatch.setattr(GraphOrigins, "kernel", broken)
    _, (code,) = _compile_on(lambda x: torch.cos(x) / 3, torch.randn(8))
    (only,) = brackets(code)
    assert re.fullmatch(r"cpp_fused_cos_div_\d+", only.annotation["name"])
    assert "could not label" in caplog.text


def test_runtime_enters_and_exits_balance(monkeypatch, model):
    compiled, x = torch.compile(model), torch.randn(4, 8)
    with torch.no_grad(), config.patch(ON):
        _, (code,) = run_and_get_code(compiled, x)
        scopes = CountingMarkKernels()
        for module in PyCodeCache.modules:
            if _source(module) == code:
                monkeypatch.setattr(module, "_mark_kernels", scopes)
        compiled(x)  # the compiled module again, now with the counting stand-in
    expected = [b.annotation for b in brackets(code)]
    assert len(expected) == 9 and scopes.entered == expected
    assert scopes.exited == len(expected) and scopes.depth == 0 and scopes.deepest == 1


def test_toggling_in_one_process_never_serves_stale_code():
    def fn(x):
        return torch.sigmoid(x) * 5

    x = torch.randn(8)
    seen = []
    for on in (True, False, True):
        hits = counters["inductor"]["fxgraph_cache_hit"]
        with config.patch({TOGGLE_KEY: on}):
            _, (code,) = run_and_get_code(torch.compile(fn), x)
        seen.append((len(brackets(code)), counters["inductor"]["fxgraph_cache_hit"] - hits))
    assert seen == [(1, 0), (0, 0), (1, 1)]  # the last one is a cache hit, annotated


def test_toggling_a_training_step_never_serves_stale_code():
    layer = nn.Linear(4, 4)
    x = torch.randn(2, 4)

    def step(x):
        layer(x).relu().sum().backward()

    seen = []
    for on in (True, False, True):
        hits = counters["aot_autograd"]["autograd_cache_hit"]
        with config.patch({TOGGLE_KEY: on}):
            _, codes = run_and_get_code(torch.compile(step), x)
        phases = {b.annotation.get("autograd_phase") for b in all_brackets(codes)}
        seen.append((phases, counters["aot_autograd"]["autograd_cache_hit"] - hits))
    assert seen == [({None, "backward"}, 0), (set(), 0), ({None, "backward"}, 1)]


def test_codegen_digest_is_part_of_the_cache_key():
    def fn(x):
        return torch.exp(x) + 7

    x = torch.randn(8)
    _compile_on(fn, x)
    misses = counters["inductor"]["fxgraph_cache_miss"]
    with config.patch({CODEGEN_VERSION_KEY: "a-different-cgfast"}):
        _compile_on(fn, x)
    assert counters["inductor"]["fxgraph_cache_miss"] == misses + 1


class CountingMarkKernels:
    """Stands in for ``mark_kernels``: records what the generated code enters."""

    def __init__(self) -> None:
        self.entered, self.exited, self.depth, self.deepest = [], 0, 0, 0

    def __call__(self, annotation):
        counter = self

        class Scope:
            def __enter__(self):
                counter.entered.append(annotation)
                counter.depth += 1
                counter.deepest = max(counter.deepest, counter.depth)

            def __exit__(self, *exc):
                counter.exited += 1
                counter.depth -= 1

        return Scope()


def _source(module) -> str:
    with open(module.__file__) as file:
        return file.read()


def _compile_on(fn, *args):
    with config.patch(ON):
        return run_and_get_code(torch.compile(fn), *args)


COUNTS = re.compile(r"^\s*_counts_ctx = _count_kernels\((\d+), (\d+)\)$")


def test_estimates_put_inductors_flops_and_bytes_in_each_extern_bracket():
    """With ``triton.cudagraph_kernel_flops`` each bracket Inductor can estimate holds a
    ``count_kernels`` scope around the launch: an extern mm its FLOPs by torch's formula
    and the bytes of its operands and result (float32); off, no such line."""
    from cgfast.inductor import FLOPS_KEY

    def matmul(a, b):
        return (a @ b).sin()

    a, b = torch.randn(4, 8), torch.randn(8, 16)
    torch._dynamo.reset()
    with config.patch({**ON, FLOPS_KEY: True}):
        _, (code,) = run_and_get_code(torch.compile(matmul), a, b)
    mm = launching(brackets(code), "extern_kernels.mm(")[0]
    assert mm.annotation == {"name": "mm"}
    assert COUNTS.match(mm.body[0]) and mm.body[-1] == "_counts_ctx.__exit__(None, None, None)"
    assert COUNTS.match(mm.body[0]).groups() == (str(2 * 4 * 8 * 16), str(4 * (4 * 8 + 8 * 16 + 4 * 16)))
    assert "from cgfast.capture import count_kernels as _count_kernels" in code
    torch._dynamo.reset()
    _, (plain,) = _compile_on(matmul, a, b)
    assert "_count_kernels" not in plain
