"""Make Inductor's FX-graph and AOTAutograd cache keys cover what the brackets say.

Both keys hash the graph's code, which leaves out ``node.meta``: two graphs alike but
for their module stacks (the same layers compiled under different roots, or under
different ``torch.fx.traceback.annotate`` labels) would share generated code, and the
second would be served the first one's brackets. With the toggle on, the module
stacks and user labels of every node join the key; off, the key is as torch makes it.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

_WRAPPED_MARK = "_cgfast_keys_annotations"
ATTRIBUTE = "cgfast_annotation_meta"

# (module, class) whose __init__(self, gm, ...) gathers what a cache key hashes.
KEY_DETAILS = (
    ("torch._inductor.codecache", "FxGraphHashDetails"),
    ("torch._functorch._aot_autograd.autograd_cache", "AOTAutogradCacheDetails"),
)


def annotation_meta(gm: Any) -> tuple:
    """Per node of ``gm`` and its subgraphs: the module stack sources and user labels."""
    import torch.fx

    found = []
    for name, module in gm.named_modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            stack = node.meta.get("nn_module_stack") or node.meta.get("fwd_nn_module_stack") or {}
            custom = node.meta.get("custom") or {}
            if stack or custom:
                found.append(
                    (
                        name,
                        node.name,
                        tuple(str(entry[0]) for entry in stack.values()),
                        tuple(sorted((str(k), repr(v)) for k, v in custom.items())),
                    )
                )
    return tuple(found)


def _keyed(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def __init__(self: Any, gm: Any, *args: Any, **kwargs: Any) -> None:
        original(self, gm, *args, **kwargs)
        from cgfast.inductor._wrapper import annotations_enabled

        if annotations_enabled():
            setattr(self, ATTRIBUTE, annotation_meta(gm))

    setattr(__init__, _WRAPPED_MARK, True)
    return __init__


def install() -> None:
    import importlib

    for module_name, class_name in KEY_DETAILS:
        details = getattr(importlib.import_module(module_name), class_name)
        if not getattr(details.__init__, _WRAPPED_MARK, False):
            details.__init__ = _keyed(details.__init__)
