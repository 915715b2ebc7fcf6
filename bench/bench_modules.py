"""Cost of cgfast.capture.annotate_modules.

    python bench/bench_modules.py [--json out.json] [--models resnet50,vit_small_patch16_224]
                                  [--repeat N] [--profile DIR]
    python bench/bench_modules.py --against OTHER/python [--rounds 5] [...]

Always (CPU or GPU): the cost per module call outside any capture, without and with
an active handle (the hooks' flag check), and with a pair of global hooks that do
nothing (torch's slower call path, which cgfast's hooks take during a capture), on 200
``nn.Identity`` modules. And inside a capture on the stand-in driver of
``bench_driver_calls.py`` (a library answering at once; node counts counting up, as if
each module launched a kernel): what an active handle adds per module call of 200
``nn.ReLU`` modules (a forward's two node counts through the extension, the spans), and
what the capture's end costs (resolving the spans, one native walk of the graph,
remapping), medians of ``--repeat`` x 10 captures.
Without a GPU also, for each model (batch 1, 64x64, one CPU thread): its forward captured
on the stand-in driver plain, with ``annotate_modules``, with ``stacks=True``, with
``flops=True`` and with a no-op dispatch mode besides ``annotate_modules`` (the floor of
``stacks=True`` and ``flops=True``, each a dispatch mode), medians of
``--repeat`` captures each, interleaved: what each adds in ms and per aten op (the CPU does
the model's work too, so ratios to plain mean nothing here; a GPU capture only launches).
With a GPU also, side by side in one run: capture time of ``torch.cuda.graph`` around one
forward (batch 8, ``torch.no_grad``) plain, with ``annotate_modules`` (without and
with ``stacks=True``, and with ``flops=True``), with ``annotate_all_modules`` (what ``cgfast run`` opens), and with a
``mark_kernels`` scope per module (what hand-written hooks cost before), and with a
torch dispatch mode and a torch function mode that only call each op (what a mode alone
costs: the floor of ``stacks=True``, which records lines from a dispatch mode), median of
``--repeat`` captures each, interleaved; then each model's ratio to a plain capture
against the targets (annotate_modules at most 1.15x plain, with stacks=True 1.6x).
With ``--profile DIR`` also where an annotated capture's extra time goes: cgfast's parts
timed by wrapping them (module hooks, capture begin/end, topology walk, resolve, hook
(un)installation), garbage collection, each driver query timed on the model's graph,
torch's slow call path under two no-op global hooks, and a cProfile of one annotated
capture written to DIR.
``--against`` runs all of it (not ``--profile``) for this build and another one, side by
side (``side_by_side.py``): medians of ``--rounds`` runs per build, alternating.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import inspect
import json
import os
import statistics
import sys
import tempfile
import time

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import cgfast
from bench_driver_calls import build_stand_in
from capture_build import patch_class, state, unpatch_class
from cgfast import capture
from cgfast.capture._id_sources import CuptiIdSource
from cgfast.capture._interface import Backend
from cgfast.capture._libcuda import LibcudaGraphs
from side_by_side import side_by_side

# issue #38: capture with annotate_modules at most 1.15x a plain capture, with stacks=True 1.6x
TARGET_RATIO = 1.15
STACKS_TARGET_RATIO = 1.6


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


class _StandInStreams:
    """StreamOps of one stream (0x5), capturing while a stand-in capture is open."""

    def __init__(self) -> None:
        self.capturing = False

    def capturing_stream(self):
        return 0x5 if self.capturing else None

    def current_stream(self) -> int:
        return 0x5

    def handle(self, stream) -> int:
        return 0x5

    def use(self, stream):
        return contextlib.nullcontext()


class _StandInGraph:
    """A graph class capturing on the stand-in (patched as ``install()`` patches torch's)."""

    streams = _StandInStreams()
    restart = None  # the stand-in's stand_in_restart

    def capture_begin(self) -> None:
        type(self).restart()
        self.streams.capturing = True

    def capture_end(self) -> None:
        self.streams.capturing = False

    def raw_cuda_graph_exec(self) -> int:
        return 0x77


@contextlib.contextmanager
def stand_in_driver(nodes: int):
    """cgfast's backend on the stand-in driver (``nodes`` nodes, count queries counting up)
    and ``_StandInGraph`` patched as ``install()`` patches torch's graph class."""
    with tempfile.TemporaryDirectory() as directory:
        library = build_stand_in(directory, nodes, growing=True)
        lib = ctypes.CDLL(library)
        _StandInGraph.restart = lib.stand_in_restart
        state.use_backend(
            Backend(LibcudaGraphs(lib), CuptiIdSource(library), _StandInGraph.streams, "stand-in")
        )
        patch_class(_StandInGraph)
        try:
            yield
        finally:
            unpatch_class(_StandInGraph)
            state.forget_backend()


def _stand_in_capture(model, x, variant: str) -> tuple:
    """One stand-in capture of ``model(x)`` under ``torch.no_grad``: (forward seconds,
    capture end seconds, nodes annotated). ``variant``: plain, annotated, stacks, flops, or
    noop_dispatch_mode (annotated, and a dispatch mode that only calls each op)."""
    handle = (
        capture.annotate_modules(model, stacks=variant == "stacks", flops=variant == "flops")
        if variant != "plain"
        else None
    )
    graph = _StandInGraph()
    try:
        with torch.no_grad():
            graph.capture_begin()
            mode = NoopMode.dispatch() if variant == "noop_dispatch_mode" else None
            start = time.perf_counter()
            model(x)
            forward = time.perf_counter() - start
            if mode is not None:
                mode.remove()
            start = time.perf_counter()
            graph.capture_end()
            end = time.perf_counter() - start
        return forward, end, len(capture.get_kernel_annotations())
    finally:
        if handle is not None:
            handle.remove()
        capture.clear_kernel_annotations()


def stand_in_capture_us(repeat: int) -> dict:
    """Inside a capture on the stand-in driver: what an active handle adds per module call
    (200 ``nn.ReLU`` in a ``Sequential``, a 1-element input: one op a module), without and
    with ``stacks=True``, and what the end of an annotated capture costs; medians of
    ``repeat`` x 10 captures, plain, annotated and with stacks alternating."""
    model = torch.nn.Sequential(*[torch.nn.ReLU() for _ in range(200)])
    x = torch.zeros(1)
    calls = 201
    forward: dict = {"plain": [], "annotated": [], "stacks": []}
    end_us = []
    with stand_in_driver(1024):
        for _ in range(repeat * 10):
            for variant in forward:
                seconds, end, annotated = _stand_in_capture(model, x, variant)
                forward[variant].append(seconds)
                if variant == "annotated":
                    end_us.append(end * 1e6)
                    if annotated != 2 * calls - 1:  # every node but the one after the root's exit
                        raise SystemExit(
                            f"the stand-in capture annotated {annotated} nodes, not {2 * calls - 1}"
                        )
    plain = statistics.median(forward["plain"]) * 1e6 / calls
    within = statistics.median(forward["annotated"]) * 1e6 / calls
    stacks = statistics.median(forward["stacks"]) * 1e6 / calls
    return {
        "plain": plain,
        "annotated": within,
        "added": within - plain,
        "stacks": stacks,
        "stacks_added": stacks - plain,
        "capture_end": statistics.median(end_us),
    }


def stand_in_model_ms(model, x, repeat: int) -> dict:
    """A real model's forward captured on the stand-in driver (the CPU does the model's
    work as well): what ``annotate_modules``, ``stacks=True``, ``flops=True`` and a no-op
    dispatch mode beside ``annotate_modules`` add to the forward, in ms and per aten op,
    and the capture end's cost; medians of ``repeat`` captures of each, interleaved."""

    class CountOps(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            CountOps.ops += 1
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), CountOps():
        model(x)
    variants = ("plain", "annotated", "stacks", "flops", "noop_dispatch_mode")
    forward: dict = {variant: [] for variant in variants}
    end: dict = {variant: [] for variant in variants}
    with stand_in_driver(1024):
        for variant in variants:
            _stand_in_capture(model, x, variant)  # warm-up
        for _ in range(repeat):
            for variant in variants:
                seconds, end_seconds, _ = _stand_in_capture(model, x, variant)
                forward[variant].append(seconds * 1e3)
                end[variant].append(end_seconds * 1e3)
    medians = {variant: statistics.median(forward[variant]) for variant in variants}
    return {
        "aten_ops": CountOps.ops,
        "forward_ms": medians,
        "capture_end_ms": {variant: statistics.median(end[variant]) for variant in variants},
        "annotated_added_ms": medians["annotated"] - medians["plain"],
        "stacks_added_ms": medians["stacks"] - medians["plain"],
        "stacks_added_us_per_op": (medians["stacks"] - medians["annotated"]) * 1e3 / CountOps.ops,
        "flops_added_ms": medians["flops"] - medians["plain"],
        "flops_added_us_per_op": (medians["flops"] - medians["annotated"]) * 1e3 / CountOps.ops,
        # what a dispatch mode costs an op by itself: the floor of the line above
        "noop_dispatch_mode_us_per_op": (medians["noop_dispatch_mode"] - medians["annotated"])
        * 1e3
        / CountOps.ops,
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


class _NoopDispatch(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _NoopFunction(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class NoopMode:
    """A torch dispatch or function mode that only calls what it sees, active until
    ``remove()``: the cost of the mode itself, which every op pays."""

    def __init__(self, mode) -> None:
        self._mode = mode
        mode.__enter__()

    def remove(self) -> None:
        self._mode.__exit__(None, None, None)

    @classmethod
    def dispatch(cls) -> NoopMode:
        return cls(_NoopDispatch())

    @classmethod
    def function(cls) -> NoopMode:
        return cls(_NoopFunction())


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
        # the floor of stacks=True: a dispatch mode that does nothing but call each op
        "noop_dispatch_mode": NoopMode.dispatch,
        # and of a torch function mode (what a launch line at the Python API would cost)
        "noop_function_mode": NoopMode.function,
    }
    if hasattr(capture, "annotate_all_modules"):  # builds before cgfast run have none
        # a new handle each time: every capture pays for naming the model (cgfast run's
        # one handle pays it at the first capture of a model only)
        variants["annotate_all_modules"] = capture.annotate_all_modules
    if "flops" in inspect.signature(capture.annotate_modules).parameters:  # builds before it have none
        variants["annotate_modules_flops"] = lambda: capture.annotate_modules(model, flops=True)
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
        "noop_dispatch_mode_ratio": medians["noop_dispatch_mode"] / medians["plain"],
        "noop_function_mode_ratio": medians["noop_function_mode"] / medians["plain"],
        **(
            {"annotate_all_modules_ratio": medians["annotate_all_modules"] / medians["plain"]}
            if "annotate_all_modules" in medians
            else {}
        ),
        **(
            {"annotate_modules_flops_ratio": medians["annotate_modules_flops"] / medians["plain"]}
            if "annotate_modules_flops" in medians
            else {}
        ),
    }


class _Timers:
    """Accumulated wall time and calls of wrapped functions (``--profile``)."""

    def __init__(self) -> None:
        self.seconds: dict = {}
        self.calls: dict = {}
        self._undo: list = []

    def wrap(self, owner, attr: str, label: str) -> None:
        original = getattr(owner, attr)
        timers = self

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                timers.seconds[label] = timers.seconds.get(label, 0.0) + time.perf_counter() - start
                timers.calls[label] = timers.calls.get(label, 0) + 1

        setattr(owner, attr, timed)
        self._undo.append((owner, attr, original))

    def restore(self) -> None:
        while self._undo:
            owner, attr, original = self._undo.pop()
            setattr(owner, attr, original)


class _GcTime:
    """Time spent in Python's garbage collections while active (``gc.callbacks``); the
    full collection ``torch.cuda.graph`` starts each capture with included."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._start: float = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start

    def __enter__(self) -> _GcTime:
        import gc

        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        import gc

        gc.callbacks.remove(self)


def _per_call_us(fn, args_list, rounds: int = 5) -> float:
    """Best of ``rounds`` of calling ``fn`` on each of ``args_list``, in us per call."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for args in args_list:
            fn(*args)
        best = min(best, time.perf_counter() - start)
    return best * 1e6 / max(1, len(args_list))


def driver_call_costs(model, x) -> dict:
    """Inside a capture of ``model(x)``: us per driver query cgfast makes per module
    boundary and per node at capture end, on the real graph."""
    backend = state.backend()
    graphs, ids, streams = backend.graphs, backend.ids, backend.streams
    g = torch.cuda.CUDAGraph()
    costs: dict = {}
    with torch.no_grad(), torch.cuda.graph(g):
        model(x)
        stream = streams.current_stream()
        graph = graphs.capture_graph(stream)
        nodes = graphs.nodes(graph)
        kernels = [n for n in nodes if graphs.node_type(n) == 0]
        costs["nodes_in_graph"] = len(nodes)
        costs["kernels_in_graph"] = len(kernels)
        many = [()] * 1000
        costs["capturing_stream"] = _per_call_us(streams.capturing_stream, many)
        costs["current_stream"] = _per_call_us(streams.current_stream, many)
        costs["capture_graph"] = _per_call_us(lambda: graphs.capture_graph(stream), many)
        costs["node_count"] = _per_call_us(lambda: graphs.node_count(graph), many)
        costs["nodes_whole_graph_us"] = _per_call_us(lambda: graphs.nodes(graph), [()])
        each = [(n,) for n in nodes]
        costs["node_type"] = _per_call_us(graphs.node_type, each)
        costs["node_id"] = _per_call_us(ids.node_id, each)
        costs["dependencies"] = _per_call_us(graphs.dependencies, each)
        costs["dependents"] = _per_call_us(graphs.dependents, each)

        def launch(node):
            graphs.forget_function_names()
            return graphs.kernel_launch(node)

        costs["kernel_launch_uncached_name"] = _per_call_us(launch, [(n,) for n in kernels])
        costs["kernel_launch_cached_name"] = _per_call_us(graphs.kernel_launch, [(n,) for n in kernels])
        recorder = state.recorder

        def topology():
            recorder.record_topology(backend, graph, ids.graph_id(graph))

        costs["record_topology_whole_graph_us"] = _per_call_us(topology, [()])
        recorder.clear()
    del g
    return costs


def profile_capture(model, x, repeat: int, out_dir: str, name: str) -> dict:
    """Where an annotated capture's extra time goes: cgfast's hooks, the capture-end
    work, the driver calls one by one, torch's slow call path (no-op global hooks); and a
    cProfile of one annotated capture written to ``out_dir``."""
    import cProfile
    import pstats

    from torch.nn.modules import module as nn_module

    from cgfast.capture import _core, _graphs, _module_calls, _patches

    figures: dict = {"driver_call_us": driver_call_costs(model, x)}
    # torch's slow module-call path during a capture: two global hooks that do nothing
    noop_ms, plain_ms, plain_gc_ms, annotated_gc_ms = [], [], [], []
    for _ in range(repeat):
        with _GcTime() as gc_time:
            plain_ms.append(capture_ms(model, x))
        plain_gc_ms.append(gc_time.seconds * 1e3)
        hooks = [
            nn_module.register_module_forward_pre_hook(lambda module, args: None),
            nn_module.register_module_forward_hook(lambda module, args, output: None, always_call=True),
        ]
        try:
            noop_ms.append(capture_ms(model, x))
        finally:
            for hook in hooks:
                hook.remove()
    figures["plain_ms"] = statistics.median(plain_ms)
    figures["noop_global_hooks_ms"] = statistics.median(noop_ms)
    # cgfast's parts of an annotated capture, timed by wrapping them (medians over repeat)
    parts: dict = {}
    totals = []
    for _ in range(repeat):
        timers = _Timers()
        timers.wrap(_module_calls, "_position", "module_entry")
        timers.wrap(_module_calls, "_module_exit", "module_exit")
        timers.wrap(_graphs, "on_capture_begin", "on_capture_begin")
        timers.wrap(_graphs, "on_capture_end", "on_capture_end")
        timers.wrap(_graphs, "on_instantiated", "on_instantiated")
        timers.wrap(_core.Recorder, "record_topology", "record_topology")
        timers.wrap(_core.Recorder, "resolve", "resolve")
        # what follows each change of the capture count
        timers.wrap(type(state), "capture_began", "capture_listeners")
        timers.wrap(type(state), "capture_over", "capture_listeners")
        timers.wrap(_patches, "_capture_changed", "capture_listeners")
        handle = capture.annotate_modules(model)
        try:
            with _GcTime() as gc_time:
                totals.append(capture_ms(model, x))
            annotated_gc_ms.append(gc_time.seconds * 1e3)
        finally:
            handle.remove()
            timers.restore()
            capture.clear_kernel_annotations()
        for label, seconds in timers.seconds.items():
            parts.setdefault(label, []).append(seconds * 1e3)
        figures.setdefault("calls", dict(timers.calls))
    figures["annotated_ms"] = statistics.median(totals)
    figures["gc_ms"] = {
        "plain": statistics.median(plain_gc_ms),
        "annotated": statistics.median(annotated_gc_ms),
    }
    figures["parts_ms"] = {label: statistics.median(values) for label, values in parts.items()}
    accounted = sum(
        figures["parts_ms"].get(label, 0.0)
        for label in (
            "module_entry",
            "module_exit",
            "on_capture_begin",
            "on_capture_end",
            "on_instantiated",
            "capture_listeners",
        )
    )
    figures["unaccounted_ms"] = figures["annotated_ms"] - figures["plain_ms"] - accounted
    os.makedirs(out_dir, exist_ok=True)
    profiler = cProfile.Profile()
    handle = capture.annotate_modules(model)
    try:
        profiler.enable()
        capture_ms(model, x)
        profiler.disable()
    finally:
        handle.remove()
        capture.clear_kernel_annotations()
    with open(os.path.join(out_dir, f"cprofile_{name}.txt"), "w") as out:
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(45)
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(45)
    return figures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--models", default="resnet50,vit_small_patch16_224")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="also break an annotated capture's cost down (GPU only; cProfile output into DIR)",
    )
    parser.add_argument("--against", metavar="DIR", help="also time the cgfast build in DIR, side by side")
    parser.add_argument("--rounds", type=int, default=5, help="with --against: runs per build")
    args = parser.parse_args(argv)
    if args.against:
        if args.profile:
            parser.error("--profile is for this build alone: run it without --against")
        forwarded = ["--models", args.models, "--batch", str(args.batch), "--repeat", str(args.repeat)]
        return side_by_side(__file__, forwarded, args.against, args.rounds, args.json)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    results = {
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "backend": capture.backend(),
        "cgfast": os.path.realpath(cgfast.__file__),
        "models": {},
    }
    results["outside_capture_us_per_module_call"] = hook_cost_us(7)
    print("outside a capture, us per module call:", json.dumps(results["outside_capture_us_per_module_call"]))
    for name in filter(None, args.models.split(",")):
        model = make_model(name, device)
        batch = args.batch if cuda else 1
        side = 224 if cuda else 64
        x = torch.randn(batch, 3, side, side, device=device)
        figures = {"modules": sum(1 for _ in model.modules())}
        if cuda:
            figures.update(capture_figures(model, x, args.repeat))
            if args.profile:
                figures["profile"] = profile_capture(model, x, args.repeat, args.profile, name)
        else:
            torch.set_num_threads(1)  # the model's own work, steadier
            figures["stand_in"] = stand_in_model_ms(model, x, args.repeat)
        results["models"][name] = figures
        print(name, json.dumps(figures), flush=True)
        if cuda:
            ratio = figures["annotate_modules_ratio"]
            stacks = figures["annotate_modules_stacks_ratio"]
            print(
                f"{name}: plain {figures['capture_ms']['plain']:.2f} ms, annotate_modules "
                f"{figures['capture_ms']['annotate_modules']:.2f} ms = {ratio:.2f}x plain "
                f"(target <= {TARGET_RATIO}x: {'met' if ratio <= TARGET_RATIO else 'NOT met'}), "
                f"stacks=True {figures['capture_ms']['annotate_modules_stacks']:.2f} ms = {stacks:.2f}x "
                f"(target <= {STACKS_TARGET_RATIO}x: {'met' if stacks <= STACKS_TARGET_RATIO else 'NOT met'}; "
                f"a no-op dispatch mode alone {figures['noop_dispatch_mode_ratio']:.2f}x)",
                flush=True,
            )
    results["stand_in_capture_us_per_module_call"] = stand_in_capture_us(args.repeat)
    print(
        "inside a capture on the stand-in driver, us per module call (capture_end: us):",
        json.dumps(results["stand_in_capture_us_per_module_call"]),
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
