"""How kernel annotations are built from FX node metadata (no compilation)."""

from __future__ import annotations

import operator

import pytest

torch = pytest.importorskip("torch")

from cgfast.inductor._annotations import (  # noqa: E402
    ModuleNames,
    annotation_of,
    common_module,
    computes,
    module_path,
    user_keys,
)


@pytest.mark.parametrize(
    ("source", "path"),
    [
        ("L['self'].linear", "linear"),
        ("L['self'].layers[0].attention.wq", "layers.0.attention.wq"),
        ("L['s'].layers.0", "layers.0"),
        ("L['self']._modules['layers']._modules['3']._modules['proj']", "layers.3.proj"),
        ("G['model'].encoder.layers[1]", "encoder.layers.1"),
        ('L["mod"].blocks["first"].norm', "blocks.first.norm"),
        ("L['self']", ""),
        ("encoder.layers.0.linear1", "encoder.layers.0.linear1"),  # torch.export's spelling
    ],
)
def test_module_path_is_the_attribute_path(source, path):
    assert module_path(source) == path


def _graph(*specs):
    """FX nodes with the given (name, meta) in order, each a call of aten.add."""
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    nodes = []
    for name, meta in specs:
        node = graph.call_function(torch.ops.aten.add.Tensor, (x, x), name=name)
        node.meta.update(meta)
        nodes.append(node)
    return nodes


def _stack(*sources):
    return {"nn_module_stack": {str(i): (s, object) for i, s in enumerate(sources)}}


def test_module_is_the_innermost_module_enclosing_all_nodes():
    wq, wk, top = _graph(
        ("wq", _stack("L['self'].layers[0]", "L['self'].layers[0].attention.wq")),
        ("wk", _stack("L['self'].layers[0]", "L['self'].layers[0].attention.wk")),
        ("top", {}),
    )
    assert common_module([wq]) == "layers.0.attention.wq"
    assert common_module([wq, wk]) == "layers.0.attention"
    assert common_module([wq, top]) == "layers.0.attention.wq"  # unknown: no vote
    assert common_module([top]) is None


def test_backward_nodes_use_the_forward_stack():
    (grad,) = _graph(("mm_3", {"fwd_nn_module_stack": _stack("L['self'].proj")["nn_module_stack"]}))
    assert common_module([grad]) == "proj"


def test_user_keys_skip_inductor_internals_and_join_differing_values():
    a, b = _graph(
        ("a", {"custom": {"component": "attn", "stream": 1, "mempool": (0, 1), "_private": 2}}),
        ("b", {"custom": {"component": "ffn", "layer": 3, "nested_region_config": {}}}),
    )
    assert user_keys([a, b]) == {"component": "attn + ffn", "_private": "2", "layer": "3"}


def test_annotation_keys_and_precedence():
    node, other = _graph(
        ("relu_1", {**_stack("L['self'].ffn"), "custom": {"name": "user", "component": "c"}}),
        ("add_2", _stack("L['self'].ffn")),
    )
    assert annotation_of([node, other], "fallback", is_backward=True) == {
        "name": "relu_1 + add_2",
        "module": "ffn",
        "component": "c",
        "autograd_phase": "backward",
    }
    assert annotation_of([], "triton_poi_fused_0", is_backward=False) == {"name": "triton_poi_fused_0"}


def test_views_and_getitem_do_no_work():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    view = graph.call_function(torch.ops.aten.permute.default, (x, [1, 0]))
    item = graph.call_function(operator.getitem, (x, 0))
    add = graph.call_function(torch.ops.aten.add.Tensor, (x, x))
    assert [computes(n) for n in (x, view, item, add)] == [False, False, False, True]


def test_names_are_relative_to_the_root_and_pass_over_wrapped_functions():
    root = "L['args'][0]"
    norm, rope, top = _graph(
        ("norm", _stack(f"{root}.model", f"{root}.model.layers[0].input_layernorm")),
        (
            "rope",
            _stack(
                f"{root}.model.layers[0].self_attn",
                "G['__import_transformers_dot_models_dot_llama'].apply_rotary_pos_emb",
            ),
        ),
        ("top", _stack(f"{root}.lm_head")),
    )
    names = ModuleNames([norm, rope, top])
    assert names.of(norm) == ("model", "layers", "0", "input_layernorm")
    assert names.of(rope) == ("model", "layers", "0", "self_attn")
    assert common_module([norm, rope, top], names) is None  # the root: no module


def test_a_function_over_two_models_names_each_by_its_variable():
    enc, dec = _graph(
        ("enc", _stack("G['enc'].layers[0]")),
        ("dec", _stack("G['dec'].layers[0]")),
    )
    names = ModuleNames([enc, dec])
    assert (names.of(enc), names.of(dec)) == (("enc", "layers", "0"), ("dec", "layers", "0"))


def test_children_of_a_compiled_submodule_are_named_under_orig_mod():
    a, b = _graph(
        ("a", _stack("L['self'].block", "L['self'].block.inner")),
        ("b", _stack("L['self'].block", "L['self'].block._orig_mod.inner.proj")),
    )
    names = ModuleNames([a, b])
    assert names.of(a) == ("block", "_orig_mod", "inner")
    assert names.of(b) == ("block", "_orig_mod", "inner", "proj")


def test_module_is_that_of_the_written_nodes_and_modules_lists_the_rest():
    embedding, norm = _graph(
        ("embedding", _stack("L['self'].embed")),
        ("mul", _stack("L['self'].layers[0]", "L['self'].layers[0].norm")),
    )
    assert annotation_of([embedding, norm], "k", False, written=[norm]) == {
        "name": "embedding + mul",
        "module": "layers.0.norm",
        "modules": "embed + layers.0.norm",
    }
