"""How kernel annotations are built from FX node metadata (no compilation)."""

from __future__ import annotations

import operator

import pytest

torch = pytest.importorskip("torch")

from cgfast.inductor._annotations import (  # noqa: E402
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
    assert annotation_of([], "triton_poi_fused_0", is_backward=False) == {
        "name": "triton_poi_fused_0"
    }


def test_views_and_getitem_do_no_work():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    view = graph.call_function(torch.ops.aten.permute.default, (x, [1, 0]))
    item = graph.call_function(operator.getitem, (x, 0))
    add = graph.call_function(torch.ops.aten.add.Tensor, (x, x))
    assert [computes(n) for n in (x, view, item, add)] == [False, False, False, True]
