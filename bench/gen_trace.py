#!/usr/bin/env python3
"""Generate a synthetic Kineto trace of CUDA-graph replays, of any size, with the
annotations that go with it.

Shaped like the real H200 traces in ``shared/fixtures/h200/`` (torch 2.11), plus the
``graph node id`` that newer profilers write: graphed kernels, memcpys and memsets on
a main and a side stream, ``ac2g`` flow pairs, ``cudaGraphLaunch`` runtime events,
``gpu_user_annotation`` noise replicated on idle streams, CUPTI timestamp jitter and
real overlaps. Standard library only.

    python bench/gen_trace.py out.json --target-mb 200 [--gzip] [--seed 0]

writes ``out.json`` (or ``out.json.gz``) and ``kernel_annotations_rank0_1.{json,pkl}``
beside it (the JSON, with the graphs' topology, is written by cgfast, so it must be
importable).
"""

from __future__ import annotations

import argparse
import gzip
import pickle
import random
from pathlib import Path

# (the profiler's demangled name, the driver's name of the same kernel)
KERNELS = [
    (
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::AbsFunctor<float> >(at::TensorIteratorBase&, at::native::AbsFunctor<float> const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::AbsFunctor<float> >(at::TensorIteratorBase&, at::native::AbsFunctor<float> const&)::{lambda(int)#1})",
        "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastINS0_10AbsFunctorIfEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_",
    ),
    (
        "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::AbsFunctor<int> >(at::TensorIteratorBase&, at::native::AbsFunctor<int> const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl<at::native::AbsFunctor<int> >(at::TensorIteratorBase&, at::native::AbsFunctor<int> const&)::{lambda(int)#1})",
        "_ZN2at6native18elementwise_kernelILi128ELi4EZNS0_15gpu_kernel_implINS0_10AbsFunctorIiEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_",
    ),
    (
        "void at::native::(anonymous namespace)::linalg_eig_make_complex_eigenvectors_kernel<float>(c10::complex<float>*, c10::complex<float> const*, float const*, long, long, long)",
        "_ZN2at6native63_GLOBAL__N__730121c9_24_BatchLinearAlgebraEig_cu_e5d96c45_4494243linalg_eig_make_complex_eigenvectors_kernelIfEEvPN3c107complexIT_EEPKS6_PKS5_lll",
    ),
    (
        "at::native::(anonymous namespace)::add_kernel(float const*, float*, int)",
        "_ZN2at6native12_GLOBAL__N_110add_kernelEPKfPfi",
    ),
    (
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
    )
    * 2,
    (
        "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3_warpsize2x2x1_ffma_aligna4_alignc4_execute_kernel__5x_cublas",
    )
    * 2,
    ("triton_poi_fused_add_native_layer_norm_0",) * 2,
    ("triton_red_fused__softmax_1",) * 2,
    ("triton_per_fused_gelu_mul_2",) * 2,
]
KERNEL_NAMES = [profiler for profiler, _driver in KERNELS]
MEMCPY = "Memcpy DtoD (Device -> Device)"
MEMSET = "Memset (Device)"
MODULES = [
    "attention.wq",
    "attention.wk",
    "attention.wv",
    "attention.wo",
    "ffn.w1",
    "ffn.w2",
    "norm1",
    "norm2",
]

PID_CPU = 487
TID_CPU = 1399345472
MAIN, SIDE, IDLE = 7, 143, (20, 24)
BASE_NS = 5_361_804_756_551_770


def us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


class Node:
    def __init__(self, node_id: int, local: int, rng: random.Random) -> None:
        self.id = node_id
        r = rng.random()
        self.cat = "kernel" if r < 0.9 else ("gpu_memcpy" if r < 0.95 else "gpu_memset")
        self.name, self.driver_name = (
            rng.choice(KERNELS)
            if self.cat == "kernel"
            else (MEMCPY if self.cat == "gpu_memcpy" else MEMSET, None)
        )
        self.lane = SIDE if rng.random() < 0.2 else MAIN
        self.dur = rng.randint(2_000, 60_000)
        self.grid = [rng.choice((1, 8, 132)), 1, 1]
        self.block = [rng.choice((128, 256, 512)), 1, 1]
        self.deps: list[int] = []


class Graph:
    def __init__(self, exec_id: int, nodes: int, rng: random.Random, one_stream: bool = False) -> None:
        self.exec_id = exec_id
        self.nodes = [Node(exec_id << 32 | local, local, rng) for local in range(nodes)]
        if one_stream:
            for node in self.nodes:
                node.lane = MAIN
        last_on: dict[int, int] = {}
        for node in self.nodes:  # each stream is a chain
            if node.lane in last_on:
                node.deps.append(last_on[node.lane])
            last_on[node.lane] = node.id

    def topology(self) -> list[dict]:
        """The graph as ``cgfast.capture.get_graph_topology()`` reports it."""
        kinds = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
        return [
            {
                "id": n.id,
                "type": kinds[n.cat],
                "name": n.driver_name,
                "deps": n.deps,
                "grid": n.grid if n.cat == "kernel" else None,
                "block": n.block if n.cat == "kernel" else None,
            }
            for n in self.nodes
        ]

    def annotations(
        self, rng: random.Random, module_runs: int = 1, modules: list[str] | None = None
    ) -> dict[int, list]:
        out: dict[int, list] = {}
        if modules is not None:
            # as annotate_modules labels a model's kernels: its innermost module, if any
            return {n.id: [{"name": m, "module": m}] for n, m in zip(self.nodes, modules) if m}
        for i, n in enumerate(self.nodes):
            node_id, lane = n.id, n.lane
            layer = i * 12 // len(self.nodes)
            module = MODULES[i // module_runs % len(MODULES)]
            items: list = [{"name": f"layers.{layer}.{module}", "module": f"layers.{layer}.{module}"}]
            if rng.random() < 0.3:
                items.append({"name": f"layers.{layer}", "layer": layer})
            if lane == SIDE:
                items[0]["stream"] = 60 + (i % 2)
            if rng.random() < 0.05:
                items.append(f"block {layer}")
            # a compiled model annotates every kernel; the other benchmarks leave a tenth bare
            if rng.random() < 0.9 or module_runs > 1:
                out[node_id] = items
        return out


def replay_events(
    graph: Graph, correlation: int, start_ns: int, rng: random.Random, out: list[str], node_ids: bool = True
) -> int:
    """Append the CPU and GPU events of one replay; returns where the next one starts."""
    launch_ns = start_ns
    out.append(
        f'{{"ph": "X", "cat": "cpu_op", "name": "CUDAGraph::replay", "pid": {PID_CPU}, "tid": {TID_CPU}, '
        f'"ts": {us(launch_ns - 3_000)}, "dur": {us(25_000)}, "args": {{"External id": {correlation}, "Record function id": 0}}}}'
    )
    out.append(
        f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": {PID_CPU}, "tid": {TID_CPU}, '
        f'"ts": {us(launch_ns)}, "dur": {us(20_000)}, "args": {{"cbid": 311, "correlation": {correlation}}}}}'
    )
    out.append(
        f'{{"ph": "s", "id": {correlation}, "pid": {PID_CPU}, "tid": {TID_CPU}, "ts": {us(launch_ns)}, "cat": "ac2g", "name": "ac2g"}}'
    )
    lane_end = {MAIN: launch_ns + 30_000, SIDE: launch_ns + 30_000}
    lane_start = dict(lane_end)
    first_ns = lane_end[MAIN]
    for node in graph.nodes:
        lane, dur = node.lane, node.dur
        r = rng.random()
        if r < 0.08:
            gap = -rng.randint(10, 900)  # CUPTI jitter: a sub-microsecond overlap
        elif r < 0.09:
            gap = -rng.randint(2_000, 20_000)  # a real overlap
        else:
            gap = rng.randint(100, 3_000)
        # A node never starts before the one it depends on (the previous on its stream).
        ts = max(lane_end[lane] + gap, lane_start[lane] + 1_000, first_ns)
        if node.cat == "kernel":
            extra = (
                f'"registers per thread": {rng.choice((32, 128, 255))}, "shared memory": 0, "blocks per SM": 0.969697, '
                f'"warps per SM": 3.878788, "grid": {node.grid}, "block": {node.block}, '
                f'"est. achieved occupancy %": 6'
            )
        else:
            extra = f'"bytes": {rng.choice((4096, 1048576))}, "memory bandwidth (GB/s)": 512.5'
        node_id = f', "graph node id": {node.id}' if node_ids else ""
        out.append(
            f'{{"ph": "X", "cat": "{node.cat}", "name": "{node.name}", "pid": 0, "tid": {lane}, "ts": {us(ts)}, "dur": {us(dur)}, '
            f'"args": {{"External id": {correlation}, "queued": 0, "device": 0, "context": 1, "stream": {lane}, '
            f'"correlation": {correlation}, {extra}{node_id}}}}}'
        )
        out.append(
            f'{{"ph": "f", "id": {correlation}, "pid": 0, "tid": {lane}, "ts": {us(ts)}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}'
        )
        lane_start[lane] = ts
        lane_end[lane] = max(lane_end[lane], ts + dur)
    end_ns = max(lane_end.values())
    for lane in (MAIN, SIDE, *IDLE):
        out.append(
            f'{{"ph": "X", "cat": "gpu_user_annotation", "name": "## Call CompiledFxGraph f62gi5ji4fxpkdkqiob ##", "pid": 0, '
            f'"tid": {lane}, "ts": {us(first_ns)}, "dur": {us(end_ns - first_ns)}, "args": {{"External id": {correlation}}}}}'
        )
    for lane in IDLE:
        out.append(
            f'{{"ph": "f", "id": {correlation}, "pid": 0, "tid": {lane}, "ts": {us(first_ns)}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}'
        )
    return end_ns + rng.randint(5_000, 50_000)


def eager_kernel(correlation: int, start_ns: int, out: list[str], node_ids: bool = True) -> int:
    """An eager (not graphed) launch: the profiler writes graph node id 0."""
    node_id = ', "graph node id": 0' if node_ids else ""
    out.append(
        f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {PID_CPU}, "tid": {TID_CPU}, '
        f'"ts": {us(start_ns)}, "dur": {us(4_000)}, "args": {{"cbid": 211, "correlation": {correlation}}}}}'
    )
    out.append(
        f'{{"ph": "X", "cat": "kernel", "name": "{KERNEL_NAMES[0]}", "pid": 0, "tid": {MAIN}, "ts": {us(start_ns + 6_000)}, '
        f'"dur": {us(3_000)}, "args": {{"queued": 0, "device": 0, "context": 1, "stream": {MAIN}, "correlation": {correlation}, '
        f'"grid": [1, 1, 1], "block": [128, 1, 1]{node_id}}}}}'
    )
    return start_ns + 12_000


def metadata() -> list[str]:
    out = [
        f'{{"name": "process_name", "ph": "M", "ts": {us(BASE_NS)}, "pid": {PID_CPU}, "tid": 0, "args": {{"name": "python3"}}}}',
        f'{{"name": "process_name", "ph": "M", "ts": {us(BASE_NS)}, "pid": 0, "tid": 0, "args": {{"name": "python3"}}}}',
        f'{{"name": "process_labels", "ph": "M", "ts": {us(BASE_NS)}, "pid": 0, "tid": 0, "args": {{"labels": "GPU 0"}}}}',
        f'{{"name": "thread_name", "ph": "M", "ts": {us(BASE_NS)}, "pid": {PID_CPU}, "tid": {TID_CPU}, "args": {{"name": "thread {TID_CPU} (python3)"}}}}',
    ]
    for lane in (MAIN, SIDE, *IDLE):
        out.append(
            f'{{"name": "thread_name", "ph": "M", "ts": {us(BASE_NS)}, "pid": 0, "tid": {lane}, "args": {{"name": "stream {lane} "}}}}'
        )
        out.append(
            f'{{"name": "thread_sort_index", "ph": "M", "ts": {us(BASE_NS)}, "pid": 0, "tid": {lane}, "args": {{"sort_index": {lane}}}}}'
        )
    return out


HEADER = (
    '{"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150109880320, '
    '"computeMajor": 9, "computeMinor": 0, "numSms": 132}], "trace_id": "SYNTHETIC", "cuda_driver_version": 13000, '
    '"cuda_runtime_version": 13000, "cupti_version": 130001, "displayTimeUnit": "ms", "baseTimeNanoseconds": 1790857026000000000, '
    '"traceEvents": [\n'
)
FOOTER = '\n], "traceName": "synthetic.pt.trace.json"}\n'


def generate(
    path: Path,
    target_mb: float,
    graphs: int = 3,
    nodes: int = 200,
    seed: int = 0,
    node_ids: bool = True,
    module_runs: int = 1,
    modules: list[str] | None = None,
) -> tuple[dict[int, list], dict[int, list]]:
    """Write the trace to ``path`` (gzipped for ``.gz``); returns its annotations and
    the topology of its graphs. Without ``node_ids`` the profiler wrote no ``graph
    node id`` (torch <= 2.12), the rest is the same for the same seed. ``module_runs``
    consecutive nodes share a module (1: each its own, and a tenth of the nodes bare, as
    the other benchmarks have it; more: every node annotated, as a compiled model's
    kernels are, in runs of a few per module). ``modules`` gives each graph the kernels of
    a real model instead: one node per entry, on one stream, labelled with it (``""``:
    no module)."""
    rng = random.Random(seed)
    if modules is not None:
        nodes = len(modules)
    recorded = [Graph(2 * (g + 1), nodes, rng, one_stream=modules is not None) for g in range(graphs)]
    annotations: dict[int, list] = {}
    for g in recorded:
        annotations.update(g.annotations(rng, module_runs, modules))
    topology = {g.exec_id: g.topology() for g in recorded}
    target = int(target_mb * 1e6)
    opener = gzip.open if path.name.endswith(".gz") else open
    written = 0
    correlation = 5
    t = BASE_NS + 2_000_000
    with opener(path, "wt", **({"compresslevel": 1} if path.name.endswith(".gz") else {})) as f:
        f.write(HEADER)
        first = True
        while written < target:
            chunk: list[str] = []
            for _ in range(20):
                if rng.random() < 0.1:
                    t = eager_kernel(correlation, t, chunk, node_ids)
                else:
                    t = replay_events(rng.choice(recorded), correlation, t, rng, chunk, node_ids)
                correlation += 1
            text = ",\n".join(chunk)
            f.write(text if first else ",\n" + text)
            first = False
            written += len(text) + 2
        f.write(",\n" + ",\n".join(metadata()))
        f.write(FOOTER)
    return annotations, topology


def write_annotations(
    directory: Path, annotations: dict[int, list], topology: dict[int, list] | None = None
) -> tuple[Path, Path]:
    """``kernel_annotations_rank0_1.json`` (cgfast's format, with the topology, written
    by cgfast) and ``.pkl`` (as PyTorch pickles them, for the reference)."""
    from cgfast.annotations import save_annotations

    json_path = directory / "kernel_annotations_rank0_1.json"
    pkl_path = directory / "kernel_annotations_rank0_1.pkl"
    save_annotations(json_path, annotations, graphs=topology)
    with open(pkl_path, "wb") as f:
        pickle.dump(annotations, f)
    return json_path, pkl_path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("output", type=Path)
    p.add_argument("--target-mb", type=float, default=200.0, help="uncompressed size (MB)")
    p.add_argument("--graphs", type=int, default=3)
    p.add_argument("--nodes", type=int, default=200, help="nodes per graph")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-node-ids",
        action="store_true",
        help="write no graph node id (like torch <= 2.12); the annotations keep the topology",
    )
    p.add_argument(
        "--module-runs",
        type=int,
        default=1,
        help="consecutive nodes sharing a module (more than 1: every node annotated)",
    )
    a = p.parse_args()
    annotations, topology = generate(
        a.output,
        a.target_mb,
        a.graphs,
        a.nodes,
        a.seed,
        node_ids=not a.no_node_ids,
        module_runs=a.module_runs,
    )
    write_annotations(a.output.parent, annotations, topology)


if __name__ == "__main__":
    main()
