"""A tensor-parallel transformer sharded by hand, its forward captured with the all-reduces
inside one CUDA graph per rank.

It imitates Megatron-style tensor parallelism as inference engines implement it: in every
block the attention's ``qkv`` projection and the MLP's ``up_proj`` are
``ColumnParallelLinear`` (each rank holds a slice of the output features), the attention's
``out_proj`` and the MLP's ``down_proj`` are ``RowParallelLinear`` (each rank holds a slice of
the input features and sums the partial products with ``dist.all_reduce`` in its forward).
One process per rank, started by torchrun (``--launcher torchrun``, the default when
``RANK`` is set) or by ``torch.multiprocessing.spawn`` (``--launcher spawn --nprocs 2``);
NCCL on CUDA (one GPU per rank), gloo on CPU. On CUDA each rank warms the forward up on a
side stream, captures it into one CUDA graph (NCCL's all-reduce kernels inside) and replays
it ``--replays`` times under ``torch.profiler.profile`` with
``tensorboard_trace_handler(TRACE_DIR, worker_name="rank<rank>")``.

Before the capture, each rank runs one eager forward with forward hooks on the
``RowParallelLinear`` modules and writes ``TRACE_DIR/truth_rank<R>.json``::

    {"rank": R, "world_size": W, "all_reduce_modules": ["blocks.0.attention.out_proj", ...]}

the module path (from the model) of every ``RowParallelLinear`` call, in call order: one
all-reduce per call, so the k-th all-reduce kernel of a replay belongs to the k-th entry.

    torchrun --nproc-per-node 2 examples/engines/tensor_parallel.py --trace-dir DIR
    python examples/engines/tensor_parallel.py --launcher spawn --nprocs 2 --trace-dir DIR
    python examples/engines/tensor_parallel.py --launcher spawn --trace-dir DIR --device cpu   # gloo, no capture

``--device cpu`` keeps the processes, the all-reduces (gloo), the truth files and the
profiler, and runs the forward eagerly. One line on stdout, ``done N replays on W ranks``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing
import torch.nn.functional as F
from torch import nn

VOCAB = 4096
HIDDEN = 512
HEADS = 8


class OneLineErrorParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (and exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    parser = OneLineErrorParser(prog="tensor_parallel.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace-dir", required=True, help="traces and truth files, one per rank")
    parser.add_argument(
        "--launcher",
        choices=["torchrun", "spawn"],
        default="torchrun" if "RANK" in os.environ else "spawn",
        help="who started the ranks (default: torchrun when RANK is set, else spawn)",
    )
    parser.add_argument("--nprocs", type=positive_int, default=2, help="ranks to spawn (default 2)")
    parser.add_argument("--layers", type=positive_int, default=2, help="transformer blocks (default 2)")
    parser.add_argument("--replays", type=positive_int, default=10, help="profiled replays (default 10)")
    parser.add_argument("--batch-size", type=positive_int, default=4)
    parser.add_argument("--seq-len", type=positive_int, default=64)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.launcher == "torchrun":
        missing = [name for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK") if name not in os.environ]
        if missing:
            parser.error(f"--launcher torchrun, but {', '.join(missing)} not set: start me with torchrun")
    world_size = args.nprocs if args.launcher == "spawn" else int(os.environ["WORLD_SIZE"])
    if HEADS % world_size:
        parser.error(f"{HEADS} attention heads do not split over {world_size} ranks")
    if args.device == "cuda":
        ranks_here = args.nprocs if args.launcher == "spawn" else int(os.environ["LOCAL_WORLD_SIZE"])
        if torch.cuda.device_count() < ranks_here:
            parser.error(f"NCCL needs one GPU per rank: {ranks_here} ranks, {torch.cuda.device_count()} GPUs")
    return args


# --- the model ---


class ColumnParallelLinear(nn.Module):
    """``x @ W.T`` with W's output features split over the ranks: each rank computes its
    slice of the output, with no communication."""

    def __init__(self, in_features: int, out_features: int, world_size: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features // world_size, in_features) * in_features**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class RowParallelLinear(nn.Module):
    """``x @ W.T`` with W's input features split over the ranks: each rank multiplies its
    slice of the input, and an all-reduce sums the partial products."""

    def __init__(self, in_features: int, out_features: int, world_size: int):
        super().__init__()
        shard = in_features // world_size
        self.weight = nn.Parameter(torch.randn(out_features, shard) * in_features**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight)
        dist.all_reduce(out)
        return out


class ParallelAttention(nn.Module):
    """Causal self-attention over this rank's heads."""

    def __init__(self, hidden: int, heads: int, world_size: int):
        super().__init__()
        self.local_heads = heads // world_size
        self.head_dim = hidden // heads
        self.qkv = ColumnParallelLinear(hidden, 3 * hidden, world_size)
        self.out_proj = RowParallelLinear(hidden, hidden, world_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        qkv = self.qkv(x).view(batch, seq, 3, self.local_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out_proj(out.transpose(1, 2).reshape(batch, seq, -1))


class ParallelMLP(nn.Module):
    def __init__(self, hidden: int, world_size: int):
        super().__init__()
        self.up_proj = ColumnParallelLinear(hidden, 4 * hidden, world_size)
        self.down_proj = RowParallelLinear(4 * hidden, hidden, world_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.gelu(self.up_proj(x)))


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int, world_size: int):
        super().__init__()
        self.attention_norm = nn.LayerNorm(hidden)
        self.attention = ParallelAttention(hidden, heads, world_size)
        self.mlp_norm = nn.LayerNorm(hidden)
        self.mlp = ParallelMLP(hidden, world_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class TensorParallelTransformer(nn.Module):
    """Embedding and final norm replicated on every rank, the blocks sharded."""

    def __init__(self, layers: int, world_size: int):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.blocks = nn.ModuleList(Block(HIDDEN, HEADS, world_size) for _ in range(layers))
        self.norm = nn.LayerNorm(HIDDEN)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


# --- one rank ---


def all_reduce_modules(model: nn.Module, input_ids: torch.Tensor) -> list:
    """The path of every ``RowParallelLinear`` called by one eager forward, in call order,
    recorded by forward hooks that are removed afterwards."""
    calls = []
    handles = [
        module.register_forward_hook(lambda _module, _args, _out, name=name: calls.append(name))
        for name, module in model.named_modules()
        if isinstance(module, RowParallelLinear)
    ]
    try:
        model(input_ids)
    finally:
        for handle in handles:
            handle.remove()
    return calls


def write_truth(args: argparse.Namespace, rank: int, world_size: int, modules: list) -> None:
    path = os.path.join(args.trace_dir, f"truth_rank{rank}.json")
    with open(path, "w") as file:
        json.dump({"rank": rank, "world_size": world_size, "all_reduce_modules": modules}, file, indent=1)


def capture(model: nn.Module, input_ids: torch.Tensor) -> torch.cuda.CUDAGraph:
    """One CUDA graph of the forward, all-reduces included, after a warm-up on a side stream
    (which also lets NCCL set up its communicator outside the capture)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(input_ids)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model(input_ids)
    return graph


def profile(step, args: argparse.Namespace, rank: int, device: torch.device) -> None:
    """``--replays`` calls of ``step`` under the profiler, this rank's trace in --trace-dir."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    handler = torch.profiler.tensorboard_trace_handler(args.trace_dir, worker_name=f"rank{rank}")
    with torch.profiler.profile(activities=activities, on_trace_ready=handler):
        for _ in range(args.replays):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()


def run_rank(rank: int, world_size: int, local_rank: int, args: argparse.Namespace, init_method: str) -> None:
    """One rank: join the group, build its shard of the model, write the truth, capture (on
    CUDA), profile the replays, leave the group."""
    if args.device == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", init_method, rank=rank, world_size=world_size, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method, rank=rank, world_size=world_size)
    try:
        torch.manual_seed(args.seed)
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        model = TensorParallelTransformer(args.layers, world_size).to(device=device, dtype=dtype).eval()
        input_ids = torch.randint(0, VOCAB, (args.batch_size, args.seq_len), device=device)
        with torch.no_grad():
            write_truth(args, rank, world_size, all_reduce_modules(model, input_ids))
            if device.type == "cuda":
                step = capture(model, input_ids).replay
            else:
                step = functools.partial(model, input_ids)
            profile(step, args, rank, device)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def spawned_rank(rank: int, world_size: int, args: argparse.Namespace, init_method: str) -> None:
    run_rank(rank, world_size, rank, args, init_method)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main(argv=None) -> int:
    args = parse_args(argv)
    os.makedirs(args.trace_dir, exist_ok=True)
    if args.launcher == "torchrun":
        rank, world_size, local_rank = (
            int(os.environ[name]) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK")
        )
        run_rank(rank, world_size, local_rank, args, "env://")
        if rank != 0:
            return 0
    else:
        world_size = args.nprocs
        init_method = f"tcp://127.0.0.1:{free_port()}"
        try:
            torch.multiprocessing.spawn(spawned_rank, args=(world_size, args, init_method), nprocs=world_size)
        except (
            torch.multiprocessing.ProcessRaisedException,
            torch.multiprocessing.ProcessExitedException,
        ) as error:
            print(f"tensor_parallel.py: rank {error.error_index} failed:{error}", file=sys.stderr)
            return 1
    print(f"done {args.replays} replays on {world_size} ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
