"""A program run under ``cgfast run`` by tests/test_run.py that captures on the fake
graph driver (tests/fake_graph_driver.py: no GPU needed), then profiles and exports a
trace wherever it is told, as a program's own profiler does.

    python fake_capture.py TRACE [--fork-child] [--exit-without-export] [--no-capture]
                                 [--replays N] [--forever MARKER]

Every aten op the model runs during the capture launches a fake kernel named after it,
so the recorded module of each node is known: an ``nn.Sequential`` of Linear, ReLU,
Linear gives nodes of modules ``0``, ``1`` and ``2``.
"""

import argparse
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from cgfast.capture._patches import patch_class
from cgfast.capture._runtime import runtime
from fake_graph_driver import FakeCUDAGraph, FakeGraphDriver, capturing


class LaunchEachOp(TorchDispatchMode):
    def __init__(self, driver):
        super().__init__()
        self.driver = driver

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.driver.launch(str(func))
        return out


def capture_model() -> FakeCUDAGraph:
    # cgfast run's recording starts in the program's first torch.cuda.CUDAGraph
    # capture_begin (torch's own then fails here, given no graph)
    try:
        torch.cuda.CUDAGraph.capture_begin(None)
    except Exception:
        pass
    driver = FakeGraphDriver()
    runtime.use_backend(driver.backend())
    patch_class(FakeCUDAGraph)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
    x = torch.randn(2, 8)
    graph = FakeCUDAGraph(driver)
    # the launching mode goes first, so that modes pushed at the capture's begin (launch
    # stacks) see the nodes each op adds
    with torch.no_grad(), LaunchEachOp(driver), capturing(graph):
        model(x)
    return graph


def replay_forever(graph: FakeCUDAGraph, marker: str) -> None:
    """Replay until a signal ends the program; ``marker`` is made after 20 replays."""
    replays = 0
    while True:
        graph.replay()
        replays += 1
        if replays == 20:
            open(marker, "w").close()
        time.sleep(0.001)


def export_trace(path: str) -> None:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        torch.ones(4).add_(1)
    prof.export_chrome_trace(path)


def forked_child() -> None:
    print(f"child {os.getpid()} inherited {len(runtime.recorder.annotations)} annotations", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--fork-child", action="store_true")
    parser.add_argument("--exit-without-export", action="store_true")
    parser.add_argument("--no-capture", action="store_true")
    parser.add_argument("--replays", type=int, default=0, help="replays of the captured graph")
    parser.add_argument("--forever", metavar="MARKER", help="replay until a signal ends the program")
    args = parser.parse_args()
    graph = None if args.no_capture else capture_model()
    for _ in range(args.replays):
        graph.replay()
    if args.forever:
        replay_forever(graph, args.forever)
    if args.fork_child:
        child = multiprocessing.get_context("fork").Process(target=forked_child)
        child.start()
        child.join()
    if not args.exit_without_export:
        export_trace(args.trace)
    print("program output")


if __name__ == "__main__":
    main()
