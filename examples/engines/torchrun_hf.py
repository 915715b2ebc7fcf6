"""A torchrun job: every rank captures its own CUDA graph of a Hugging Face Llama forward and
replays it under the profiler.

It imitates a data-parallel inference or evaluation script launched by torchrun: the rank,
world size and local rank come from the environment, ``gloo`` coordinates the ranks (so
two ranks can share one GPU), each rank builds the same eager Llama with random weights
(``--seed``), captures one forward with ``torch.cuda.graph`` after a warm-up on a side
stream, and replays it ``--replays`` times under ``torch.profiler.profile`` with
``tensorboard_trace_handler(TRACE_DIR, worker_name="rank<rank>")``. ``--wider-mlp-layer L``
makes the MLP of layer L three times wider, so that two runs differ in one module.

    torchrun --nproc-per-node 2 examples/engines/torchrun_hf.py --trace-dir DIR [--wider-mlp-layer 1]
    torchrun --nproc-per-node 2 examples/engines/torchrun_hf.py --trace-dir DIR --device cpu   # no capture

``--device cpu`` keeps the ranks, the process group and the profiler and runs the forward
eagerly. Rank 0 prints one line on stdout, ``done N replays on W ranks``.
"""

from __future__ import annotations

import argparse
import copy
import functools
import os
import sys

import torch
import torch.distributed as dist
import transformers
from transformers.models.llama.modeling_llama import LlamaMLP

RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


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
    parser = OneLineErrorParser(prog="torchrun_hf.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace-dir", required=True, help="where every rank writes its trace")
    parser.add_argument("--replays", type=positive_int, default=10, help="profiled replays (default 10)")
    parser.add_argument("--layers", type=positive_int, default=2, help="decoder layers (default 2)")
    parser.add_argument("--wider-mlp-layer", type=int, help="make this layer's MLP 3x wider (default: none)")
    parser.add_argument("--batch-size", type=positive_int, default=4)
    parser.add_argument("--seq-len", type=positive_int, default=128)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--seed", type=int, default=0, help="the weights' seed, the same on every rank")
    args = parser.parse_args(argv)
    if args.wider_mlp_layer is not None and not 0 <= args.wider_mlp_layer < args.layers:
        parser.error(f"--wider-mlp-layer must be in [0, {args.layers}): {args.wider_mlp_layer}")
    missing = [name for name in RANK_VARIABLES if name not in os.environ]
    if missing:
        parser.error(f"{', '.join(missing)} not set: start me with torchrun --nproc-per-node N")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but CUDA is not available")
    return args


def build_model(args: argparse.Namespace, device: torch.device) -> torch.nn.Module:
    """A Llama with random weights (nothing is downloaded), its MLP of layer
    ``--wider-mlp-layer`` three times wider than the others."""
    config = transformers.LlamaConfig(
        vocab_size=4096,
        hidden_size=512,
        intermediate_size=1408,
        num_hidden_layers=args.layers,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=max(256, args.seq_len),
        use_cache=False,
    )
    torch.manual_seed(args.seed)
    model = transformers.LlamaForCausalLM(config)
    if args.wider_mlp_layer is not None:
        wider = copy.deepcopy(config)
        wider.intermediate_size = 3 * config.intermediate_size
        model.model.layers[args.wider_mlp_layer].mlp = LlamaMLP(wider)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return model.to(device=device, dtype=dtype).eval()


def capture(model: torch.nn.Module, input_ids: torch.Tensor) -> torch.cuda.CUDAGraph:
    """One CUDA graph of the forward, after a warm-up on a side stream (torch.cuda.graph's
    recipe)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            model(input_ids=input_ids)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model(input_ids=input_ids)
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


def run(args: argparse.Namespace, rank: int, local_rank: int) -> None:
    if args.device == "cuda":
        device = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    model = build_model(args, device)
    generator = torch.Generator().manual_seed(args.seed + 1000 + rank)
    input_ids = torch.randint(0, 4096, (args.batch_size, args.seq_len), generator=generator).to(device)
    with torch.no_grad():
        if device.type == "cuda":
            step = capture(model, input_ids).replay
        else:
            step = functools.partial(model, input_ids=input_ids)
        profile(step, args, rank, device)


def main(argv=None) -> int:
    args = parse_args(argv)
    rank, world_size, local_rank = (int(os.environ[name]) for name in RANK_VARIABLES)
    dist.init_process_group("gloo")
    try:
        run(args, rank, local_rank)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        print(f"done {args.replays} replays on {world_size} ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
