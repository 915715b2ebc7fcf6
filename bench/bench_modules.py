"""Cost of cgfast.capture.annotate_modules.

    python bench/bench_modules.py [--json out.json] [--models resnet50,vit_small_patch16_224]

Always (CPU or GPU): the cost per module call outside any capture, without and with
an active handle (the hooks' flag check), and with a pair of global hooks that do
nothing (torch's slower call path, which cgfast's hooks take during a capture), on 200
``nn.Identity`` modules.
With a GPU also, side by side in one run: capture time of ``torch.cuda.graph`` around one
forward (batch 8, ``torch.no_grad``) plain, with ``annotate_modules`` (without and
with ``stacks=True``), and with a
``mark_kernels`` scope per module (what hand-written hooks cost before), median of
``--repeat`` captures each, interleaved; then each model's ratio to a plain capture
against the target (annotate_modules at most 1.5x plain).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import torch

from cgfast import capture

TARGET_RATIO = 1.5  # issue #15: capture with annotate_modules at most 1.5x a plain capture


def make_model(name: str, device: str):
    import timm

    return (
        timm.create_model(
            name, pretrained=False, **({"img_size": 64} if device == "cpu" and name.startswith("vit") else {})
        )
        .eval()
        .to(device)
    )


def hook_cost_us(repeat: int) -> dict:
    """Per module call outside a capture: 200 ``nn.Identity`` in a ``Sequential``, without
    and with an active handle (best of ``repeat`` runs of 200 forwards each)."""
    model = torch.nn.Sequential(*[torch.nn.Identity() for _ in range(200)])
    x = torch.zeros(1)
    calls = 201 * 200

    def best() -> float:
        fastest = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(200):
                model(x)
            fastest = min(fastest, time.perf_counter() - start)
        return fastest * 1e6 / calls

    without = best()
    with capture.annotate_modules(model):
        within = best()
    # What any global forward pre- and post-hook pair costs a module call (torch's slow
    # call path), as cgfast's pair does during a capture: here two hooks doing nothing.
    from torch.nn.modules import module as nn_module

    hooks = [
        nn_module.register_module_forward_pre_hook(lambda module, args: None),
        nn_module.register_module_forward_hook(lambda module, args, output: None, always_call=True),
    ]
    try:
        global_hooks = best()
    finally:
        for hook in hooks:
            hook.remove()
    return {
        "no_handle": without,
        "handle": within,
        "added": within - without,
        "noop_global_hooks": global_hooks,
        "noop_global_hooks_added": global_hooks - without,
    }


class ScopePerModule:
    """A mark_kernels scope per module call through global hooks (the old way)."""

    def __init__(self, model) -> None:
        from torch.nn.modules import module as nn_module

        names = {m: n for n, m in model.named_modules()}
        open_scopes = []

        def pre(module, args):
            name = names.get(module)
            if name is not None:
                scope = capture.mark_kernels({"module": name})
                scope.__enter__()
                open_scopes.append(scope)

        def post(module, args, output):
            if module in names:
                open_scopes.pop().__exit__(None, None, None)

        self._handles = [
            nn_module.register_module_forward_pre_hook(pre),
            nn_module.register_module_forward_hook(post),
        ]
        capture.enable_annotations()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        capture.disable_annotations()


def capture_ms(model, x) -> float:
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    start = time.perf_counter()
    with torch.no_grad(), torch.cuda.graph(g):
        model(x)
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    del g
    return elapsed * 1e3


def capture_figures(model, x, repeat: int) -> dict:
    # warm up on a side stream, as torch.cuda.graph's docs ask
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(side)
    variants = {
        "plain": lambda: None,
        "annotate_modules": lambda: capture.annotate_modules(model),
        "annotate_modules_stacks": lambda: capture.annotate_modules(model, stacks=True),
        "scope_per_module": lambda: ScopePerModule(model),
    }
    times = {name: [] for name in variants}
    for _ in range(repeat):
        for name, start in variants.items():
            handle = start()
            try:
                times[name].append(capture_ms(model, x))
            finally:
                if handle is not None:
                    handle.remove()
            capture.clear_kernel_annotations()
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {
        "capture_ms": medians,
        "annotate_modules_ratio": medians["annotate_modules"] / medians["plain"],
        "scope_per_module_ratio": medians["scope_per_module"] / medians["plain"],
        "annotate_modules_stacks_ratio": medians["annotate_modules_stacks"] / medians["plain"],
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--models", default="resnet50,vit_small_patch16_224")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    results = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "backend": capture.backend(),
        "models": {},
    }
    results["outside_capture_us_per_module_call"] = hook_cost_us(7)
    print("outside a capture, us per module call:", json.dumps(results["outside_capture_us_per_module_call"]))
    for name in args.models.split(","):
        model = make_model(name, device)
        batch = args.batch if cuda else 1
        side = 224 if cuda else 64
        x = torch.randn(batch, 3, side, side, device=device)
        figures = {"modules": sum(1 for _ in model.modules())}
        if cuda:
            figures.update(capture_figures(model, x, args.repeat))
        results["models"][name] = figures
        print(name, json.dumps(figures), flush=True)
        if cuda:
            ratio = figures["annotate_modules_ratio"]
            met = "met" if ratio <= TARGET_RATIO else "NOT met"
            print(
                f"{name}: plain {figures['capture_ms']['plain']:.2f} ms, annotate_modules "
                f"{figures['capture_ms']['annotate_modules']:.2f} ms = {ratio:.2f}x plain "
                f"(target <= {TARGET_RATIO}x: {met})",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
