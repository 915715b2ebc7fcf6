"""annotate_all_modules on real CUDA graphs: with no handle on the model it records
exactly what ``annotate_modules(model)`` records (the same annotations on the same local
node ids) for Hugging Face, timm and torchvision models, and for both graphs of
``make_graphed_callables``."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from cgfast import capture  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_registry")


def by_local_id(exec_ids) -> dict:
    """The recorded annotations of these executable graphs, by (graph order, local id)."""
    registry = capture.get_kernel_annotations()
    order = {graph: i for i, graph in enumerate(exec_ids)}
    return {
        (order[node >> 32], node & 0xFFFFFFFF): items
        for node, items in registry.items()
        if node >> 32 in order
    }


def graphed_forward(model, x, handle) -> dict:
    capture.clear_kernel_annotations()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.no_grad(), torch.cuda.stream(stream):
        for _ in range(2):
            model(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with handle(), torch.no_grad(), torch.cuda.graph(graph):
        model(x)
    torch.cuda.synchronize()
    recorded = by_local_id([max(capture.get_graph_topology())])
    assert recorded
    return recorded


def models():
    timm = pytest.importorskip("timm")
    transformers = pytest.importorskip("transformers")
    torchvision = pytest.importorskip("torchvision")
    llama = transformers.LlamaForCausalLM(
        transformers.LlamaConfig(
            vocab_size=2048,
            hidden_size=256,
            intermediate_size=688,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
        )
    )
    return {
        "llama": (llama, torch.randint(0, 2048, (2, 32))),
        "resnet50": (timm.create_model("resnet50", pretrained=False), torch.randn(2, 3, 64, 64)),
        "vit_small": (
            timm.create_model("vit_small_patch16_224", pretrained=False, img_size=64),
            torch.randn(2, 3, 64, 64),
        ),
        "tv_mobilenet": (torchvision.models.mobilenet_v3_small(), torch.randn(2, 3, 64, 64)),
    }


@pytest.mark.parametrize("name", ["llama", "resnet50", "vit_small", "tv_mobilenet"])
def test_the_same_annotations_as_annotate_modules(name):
    model, x = models()[name]
    model, x = model.cuda().eval(), x.cuda()
    with_handle = graphed_forward(model, x, lambda: capture.annotate_modules(model))
    without = graphed_forward(model, x, capture.annotate_all_modules)
    assert without == with_handle
    modules = {item["module"] for items in without.values() for item in items if "module" in item}
    assert len(modules) > 10


def test_make_graphed_callables_forward_and_backward():
    timm = pytest.importorskip("timm")
    results = []
    for handle in ("annotate_modules", "annotate_all_modules"):
        torch.manual_seed(0)
        model = timm.create_model("resnet18", pretrained=False, num_classes=10).cuda().train()
        x = torch.randn(4, 3, 64, 64, device="cuda", requires_grad=True)
        capture.clear_kernel_annotations()
        before = set(capture.get_graph_topology())
        opened = (
            capture.annotate_modules(model)
            if handle == "annotate_modules"
            else capture.annotate_all_modules()
        )
        with opened:
            torch.cuda.make_graphed_callables(model, (x,))
        torch.cuda.synchronize()
        graphs = sorted(set(capture.get_graph_topology()) - before)
        assert len(graphs) == 2  # forward and backward
        results.append(by_local_id(graphs))
    assert results[0] == results[1]
    backward = [item for items in results[1].values() for item in items if item.get("autograd_phase")]
    assert len(backward) > 50
