"""Python-side cost of cgfast.capture's driver layer, on any machine.

    python bench/bench_driver_calls.py [--nodes 400] [--repeat 5]
    python bench/bench_driver_calls.py --against OTHER/python [--rounds 9]

Compiles a stand-in for ``libcuda.so.1`` and ``libcupti`` (C, with ``cc``) whose
entry points answer at once from a chain graph of ``--nodes`` kernel nodes, and times
what cgfast does per module boundary (``node_count``: a native call through the
extension; ``capture_graph``: ctypes) and per node at capture end (``node_type``,
``node_id``, ``dependencies``, ``kernel_launch`` through ctypes, and
``Recorder.record_topology`` over the whole graph: one native walk). The real driver's
own work is not in these figures; only what Python, ctypes and the extension add to it.
Best of ``--repeat`` runs each. ``--against`` times another build side by side
(``side_by_side.py``).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time

import cgfast
from cgfast.capture._core import Recorder
from cgfast.capture._id_sources import CuptiIdSource
from cgfast.capture._interface import Backend
from cgfast.capture._libcuda import LibcudaGraphs
from side_by_side import side_by_side

_STAND_IN = r"""
#include <stddef.h>
#include <stdint.h>
static const uintptr_t base = 0x10000;
static int funcs[16];
static const char *fname = "some_kernel_name";
int cuInit(unsigned f) { return 0; }
int cuGetErrorName(int c, const char **s) { *s = "error"; return 0; }
int cuStreamGetCaptureInfo_v3(void *s, int *st, uint64_t *id, void **g, void ***deps, void **ed, size_t *n) {
  *st = 1; if (id) *id = 1; if (g) *g = (void *)0x99; if (deps) *deps = 0; if (n) *n = 0; return 0; }
int cuGraphGetRootNodes(void *g, void **a, size_t *n) { if (a && *n >= 1) a[0] = (void *)base; *n = 1; return 0; }
/* with GROWING, each count query sees one node more than the last, from 0 after
   stand_in_restart(): as if an op ran between two module boundaries */
static size_t grown;
void stand_in_restart(void) { grown = 0; }
int cuGraphGetNodes(void *g, void **a, size_t *n) {
  if (a) { size_t m = *n < NODES ? *n : NODES; for (size_t i = 0; i < m; i++) a[i] = (void *)(base + i); }
#ifdef GROWING
  else { *n = grown++; return 0; }
#endif
  *n = NODES; return 0; }
int cuGraphNodeGetDependentNodes_v2(void *node, void **a, void *e, size_t *n) {
  uintptr_t i = (uintptr_t)node - base;
  if (i + 1 < NODES) { if (a && *n) a[0] = (void *)(base + i + 1); *n = 1; } else *n = 0; return 0; }
int cuGraphNodeGetDependencies_v2(void *node, void **a, void *e, size_t *n) {
  uintptr_t i = (uintptr_t)node - base;
  if (i > 0) { if (a && *n) a[0] = (void *)(base + i - 1); *n = 1; } else *n = 0; return 0; }
int cuGraphNodeGetType(void *node, int *t) { *t = 0; return 0; }
struct P { void *func; unsigned g[3], b[3], sm; void *kp, *ex, *kern, *ctx; };
int cuGraphKernelNodeGetParams_v2(void *node, struct P *p) {
  uintptr_t i = (uintptr_t)node - base; p->func = &funcs[i % 16];
  p->g[0] = p->g[1] = p->g[2] = 1; p->b[0] = 128; p->b[1] = p->b[2] = 1; p->kern = 0; return 0; }
int cuFuncGetName(const char **s, void *f) { *s = fname; return 0; }
int cuKernelGetName(const char **s, void *f) { *s = fname; return 0; }
int cuptiGetGraphNodeId(void *node, uint64_t *id) { *id = (1ull << 32) | ((uintptr_t)node - base); return 0; }
int cuptiGetGraphId(void *g, uint32_t *id) { *id = 1; return 0; }
int cuptiGetGraphExecId(void *g, uint32_t *id) { *id = 2; return 0; }
"""


def build_stand_in(directory: str, nodes: int, growing: bool = False) -> str:
    """The stand-in library, compiled into ``directory``: a graph of ``nodes`` kernel
    nodes in a chain (``growing``: whose count queries count up, see ``_STAND_IN``)."""
    name = f"stand_in_{nodes}{'_growing' if growing else ''}"
    source = os.path.join(directory, f"{name}.c")
    library = os.path.join(directory, f"lib{name}.so")
    with open(source, "w") as out:
        out.write(_STAND_IN)
    defines = [f"-DNODES={nodes}", *(["-DGROWING"] if growing else [])]
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", *defines, "-o", library, source], check=True)
    return library


def best_us(fn, calls: int, repeat: int) -> float:
    fastest = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        fastest = min(fastest, (time.perf_counter() - start) / calls)
    return fastest * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--against", metavar="DIR", help="also time the cgfast build in DIR, side by side")
    parser.add_argument("--rounds", type=int, default=9, help="with --against: runs per build")
    args = parser.parse_args(argv)
    if args.against:
        forwarded = ["--nodes", str(args.nodes), "--repeat", str(args.repeat)]
        return side_by_side(__file__, forwarded, args.against, args.rounds, args.json)
    with tempfile.TemporaryDirectory() as directory:
        library = build_stand_in(directory, args.nodes)
        graphs = LibcudaGraphs(ctypes.CDLL(library))
        ids = CuptiIdSource(library)
        backend = Backend(graphs, ids, None, "stand-in")
        graph, node = 0x99, 0x10005
        figures = {
            "node_count_us": best_us(lambda: graphs.node_count(graph), 20000, args.repeat),
            "capture_graph_us": best_us(lambda: graphs.capture_graph(0x5), 20000, args.repeat),
            "node_type_us": best_us(lambda: graphs.node_type(node), 20000, args.repeat),
            "node_id_us": best_us(lambda: ids.node_id(node), 20000, args.repeat),
            "dependencies_us": best_us(lambda: graphs.dependencies(node), 20000, args.repeat),
            "kernel_launch_us": best_us(lambda: graphs.kernel_launch(node), 20000, args.repeat),
        }
        recorder = Recorder()
        topology_us = best_us(lambda: recorder.record_topology(backend, graph, 1), 10, args.repeat)
        figures[f"record_topology_{args.nodes}_nodes_ms"] = topology_us / 1e3
    print(json.dumps({name: round(value, 3) for name, value in figures.items()}, indent=1))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({**figures, "cgfast": os.path.realpath(cgfast.__file__)}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
