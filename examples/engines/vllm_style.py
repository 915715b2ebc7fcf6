"""A vLLM-style engine: spawned workers, a piecewise-compiled model and one CUDA graph per
piece per batch size.

It imitates vLLM's V1 engine. The parent process (vLLM's engine core) starts ``--workers``
worker processes with the ``spawn`` start method and drives them over pipes with the
commands ``step <batch>``, ``start_profile``, ``stop_profile`` and ``exit``. Each worker
builds a 2-layer Llama with random weights and compiles it with ``torch.compile`` and a
custom backend that, as vLLM's ``PiecewiseBackend`` does, splits the FX graph at every
attention call: the attention pieces run eagerly, every other piece is compiled by
Inductor (for each batch size, on its first call). On CUDA the worker's
``CUDAGraphWrapper`` then captures one CUDA graph per compiled piece per batch size, over
static input buffers and one shared memory pool, and replays them at every step, the
attention running eagerly between the replays. The profiler is started and stopped by the
parent through the workers, as vLLM's ``/start_profile`` and ``/stop_profile`` endpoints
do: ``torch.profiler.profile`` with ``tensorboard_trace_handler(TRACE_DIR,
worker_name="worker<rank>")``.

    python examples/engines/vllm_style.py --trace-dir DIR [--workers 1] [--batch-sizes 1,2,4]
    python examples/engines/vllm_style.py --trace-dir DIR --device cpu    # no GPU: no capture

``--device cpu`` keeps the processes, the piecewise compilation (Inductor's C++ backend)
and the profiler, and runs the pieces without CUDA graphs. Each worker reports on stderr
how many pieces it split and compiled; stdout gets one line, ``done N steps``. A failing
worker's error is printed by the parent, which exits with status 1.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
import traceback

import torch
import transformers
from torch._inductor.compile_fx import compile_fx
from torch.fx.passes.split_module import split_module

ATTENTION = torch.nn.functional.scaled_dot_product_attention
SEQ_LEN = 32
VOCAB = 2048


class OneLineErrorParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (and exit status 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def batch_sizes(text: str) -> list:
    """``1,2,4`` -> ``[1, 2, 4]``: distinct positive sizes, ascending."""
    try:
        sizes = sorted({int(size) for size in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if sizes[0] < 1:
        raise argparse.ArgumentTypeError(f"batch sizes must be positive: {text!r}")
    return sizes


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def parse_args(argv=None) -> argparse.Namespace:
    parser = OneLineErrorParser(prog="vllm_style.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trace-dir",
        default=os.environ.get("VLLM_TORCH_PROFILER_DIR"),
        help="where the workers' profiler writes its traces (default: $VLLM_TORCH_PROFILER_DIR)",
    )
    parser.add_argument("--workers", type=positive_int, default=1, help="worker processes (default 1)")
    parser.add_argument("--batch-sizes", type=batch_sizes, default=[1, 2, 4], help="captured batch sizes")
    parser.add_argument("--warmup-steps", type=int, default=2, help="steps before the profiler starts")
    parser.add_argument("--steps", type=positive_int, default=8, help="profiled steps (default 8)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.trace_dir is None:
        parser.error("--trace-dir is required (or set VLLM_TORCH_PROFILER_DIR)")
    if args.warmup_steps < 0:
        parser.error(f"--warmup-steps must not be negative: {args.warmup_steps}")
    return args


# --- the compilation: split at attention, Inductor for the rest (vLLM's PiecewiseBackend) ---


class InductorPiece(torch.nn.Module):
    """A piece of the split graph, compiled by Inductor on its first call."""

    def __init__(self, graph_module: torch.fx.GraphModule, stats: dict):
        super().__init__()
        self.graph_module = graph_module
        self.stats = stats
        self.compiled = None

    def forward(self, *args):
        if self.compiled is None:
            self.compiled = compile_fx(self.graph_module, list(args))
            self.stats["compiled"] += 1
        return self.compiled(*args)


class CUDAGraphWrapper(torch.nn.Module):
    """Runs a piece eagerly once (warm-up), then captures it into one CUDA graph and replays
    that graph at every later call, as vLLM's ``CUDAGraphWrapper`` does. Tensor arguments
    are copied into static buffers at each replay (vLLM's own inputs sit at fixed addresses
    instead), except parameters, whose storage never moves."""

    def __init__(self, piece: torch.nn.Module, pool, stats: dict):
        super().__init__()
        self.piece = piece
        self.pool = pool
        self.stats = stats
        self.warmed_up = False
        self.graph = None
        self.static_args = None
        self.static_output = None

    def forward(self, *args):
        if not self.warmed_up:
            self.warmed_up = True
            return self.piece(*args)
        if self.graph is None:
            self._capture(args)
        self._replay(args)
        return self.static_output

    def _capture(self, args):
        self.static_args = [self._static_copy(arg) for arg in args]
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=self.pool):
            self.static_output = self.piece(*self.static_args)
        self.stats["graphs"] += 1

    @staticmethod
    def _static_copy(arg):
        if isinstance(arg, torch.Tensor) and not isinstance(arg, torch.nn.Parameter):
            return arg.clone()
        return arg

    def _replay(self, args):
        for arg, static in zip(args, self.static_args):
            if isinstance(arg, torch.Tensor) and arg.data_ptr() != static.data_ptr():
                static.copy_(arg)
        self.graph.replay()


class PiecewiseBackend:
    """A ``torch.compile`` backend: the FX graph is split before and after every attention
    call; the attention pieces stay eager, the others are compiled by Inductor and, on
    CUDA, wrapped to be captured in CUDA graphs (sharing one memory pool)."""

    def __init__(self, capture_graphs: bool):
        self.pool = torch.cuda.graph_pool_handle() if capture_graphs else None
        self.stats = {"graphs_split": 0, "pieces": 0, "attention": 0, "compiled": 0, "graphs": 0}

    def __call__(self, graph_module: torch.fx.GraphModule, example_inputs) -> torch.fx.GraphModule:
        split, attention = split_at_attention(graph_module)
        self.stats["graphs_split"] += 1
        for name, piece in list(split.named_children()):
            self.stats["pieces"] += 1
            if name in attention:
                self.stats["attention"] += 1
                continue
            runner = InductorPiece(piece, self.stats)
            if self.pool is not None:
                runner = CUDAGraphWrapper(runner, self.pool, self.stats)
            setattr(split, name, runner)
        return split


def split_at_attention(graph_module: torch.fx.GraphModule) -> tuple:
    """The graph split into ``submod_<i>`` pieces, each attention call alone in its own
    piece; returns the split module and the names of the attention pieces."""
    partition = {}
    current = 0
    attention = set()
    for node in graph_module.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        if node.op == "call_function" and node.target is ATTENTION:
            current += 1
            attention.add(f"submod_{current}")
            partition[node] = current
            current += 1
        else:
            partition[node] = current
    if not attention:
        raise RuntimeError("the Dynamo graph has no scaled_dot_product_attention call to split at")
    split = split_module(graph_module, None, lambda node: partition[node], keep_original_order=True)
    return split, attention


# --- the worker: model, persistent inputs, profiler ---


def build_model(device: torch.device) -> torch.nn.Module:
    """A 2-layer Llama with random weights (nothing is downloaded)."""
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        use_cache=False,
        attn_implementation="sdpa",
    )
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return transformers.LlamaForCausalLM(config).to(device=device, dtype=dtype).eval()


def profiler_activities(device: torch.device) -> list:
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return activities


class Worker:
    """One worker process's model runner: compiles and captures at start-up, then serves
    steps, each padded to the smallest captured batch size that holds it."""

    def __init__(self, rank: int, args: argparse.Namespace):
        self.rank = rank
        self.trace_dir = args.trace_dir
        self.batch_sizes = args.batch_sizes
        if args.device == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("--device cuda, but CUDA is not available")
            self.device = torch.device("cuda", rank % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        else:
            self.device = torch.device("cpu")
        torch.manual_seed(args.seed)
        self.model = build_model(self.device)
        self.backend = PiecewiseBackend(capture_graphs=self.device.type == "cuda")
        self.forward = torch.compile(self.model, backend=self.backend, dynamic=False)
        self.input_ids = {
            size: torch.zeros(size, SEQ_LEN, dtype=torch.long, device=self.device)
            for size in self.batch_sizes
        }
        self.generator = torch.Generator().manual_seed(args.seed + rank)
        self.profiler = None

    def capture(self) -> dict:
        """Compiles and warms up every batch size, then captures it (on CUDA)."""
        for size in self.batch_sizes:
            self._run(size)  # compile the pieces, warm them up
            self._run(size)  # capture them
        return dict(self.backend.stats)

    def step(self, batch: int) -> list:
        """The next token of ``batch`` random prompts."""
        size = next((size for size in self.batch_sizes if size >= batch), None)
        if size is None:
            raise ValueError(f"batch {batch} is larger than the largest captured size {self.batch_sizes[-1]}")
        prompts = torch.randint(0, VOCAB, (batch, SEQ_LEN), generator=self.generator)
        self.input_ids[size][:batch].copy_(prompts)
        return self._run(size)[:batch].tolist()

    def _run(self, size: int) -> torch.Tensor:
        with torch.no_grad():
            logits = self.forward(input_ids=self.input_ids[size]).logits
        return logits[:, -1].argmax(-1)

    def start_profile(self):
        self.profiler = torch.profiler.profile(
            activities=profiler_activities(self.device),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(
                self.trace_dir, worker_name=f"worker{self.rank}"
            ),
        )
        self.profiler.start()

    def stop_profile(self):
        self.profiler.stop()
        self.profiler = None


def worker_main(rank: int, args: argparse.Namespace, conn) -> None:
    """A worker process: start-up, then one reply per command until ``exit``. Any error is
    sent to the parent as ``("error", traceback)`` and ends the process with status 1."""
    try:
        worker = Worker(rank, args)
        conn.send(("ready", worker.capture()))
        serve_commands(worker, conn)
    except Exception:
        conn.send(("error", traceback.format_exc()))
        sys.exit(1)


def serve_commands(worker: Worker, conn) -> None:
    """Runs the parent's commands, replying ``("ok", result)`` to each, until ``exit`` or
    until the parent is gone."""
    handlers = {
        "step": lambda batch: worker.step(int(batch)),
        "start_profile": worker.start_profile,
        "stop_profile": worker.stop_profile,
        "exit": lambda: None,
    }
    while True:
        try:
            command, *operands = conn.recv().split()
        except EOFError:
            return
        if command not in handlers:
            raise ValueError(f"unknown command {command!r}")
        conn.send(("ok", handlers[command](*operands)))
        if command == "exit":
            return


# --- the parent: the engine core ---


class WorkerError(RuntimeError):
    pass


class WorkerGroup:
    """The workers of the engine, each with its pipe; every command goes to all of them."""

    def __init__(self, args: argparse.Namespace):
        context = multiprocessing.get_context("spawn")
        self.processes = []
        self.pipes = []
        for rank in range(args.workers):
            parent_end, worker_end = context.Pipe()
            process = context.Process(target=worker_main, args=(rank, args, worker_end), name=f"worker{rank}")
            process.start()
            worker_end.close()
            self.processes.append(process)
            self.pipes.append(parent_end)

    def collect(self) -> list:
        """One reply from every worker; raises ``WorkerError`` with the first failure."""
        replies = []
        for rank, (process, pipe) in enumerate(zip(self.processes, self.pipes)):
            try:
                status, payload = pipe.recv()
            except EOFError:
                process.join()
                raise WorkerError(f"worker{rank} died (exit status {process.exitcode})") from None
            if status == "error":
                raise WorkerError(f"worker{rank} failed:\n{payload.rstrip()}")
            replies.append(payload)
        return replies

    def command(self, text: str) -> list:
        for pipe in self.pipes:
            pipe.send(text)
        return self.collect()

    def join(self):
        for process in self.processes:
            process.join()

    def kill(self):
        for process in self.processes:
            if process.is_alive():
                process.kill()
            process.join()


def mixed_batches(max_batch: int, steps: int, seed: int) -> list:
    """``steps`` request batches: rounds of 1..max_batch, each round shuffled."""
    rng = random.Random(seed)
    batches = []
    while len(batches) < steps:
        round_ = list(range(1, max_batch + 1))
        rng.shuffle(round_)
        batches.extend(round_)
    return batches[:steps]


def serve(args: argparse.Namespace) -> int:
    """Start-up, warm-up steps, profiled steps, exit; returns the number of steps."""
    workers = WorkerGroup(args)
    try:
        for rank, stats in enumerate(workers.collect()):
            print(
                f"worker{rank}: {stats['graphs_split']} Dynamo graphs split into {stats['pieces']} pieces, "
                f"{stats['attention']} attention pieces eager, {stats['compiled']} compiled by Inductor, "
                f"{stats['graphs']} CUDA graphs captured",
                file=sys.stderr,
            )
        max_batch = args.batch_sizes[-1]
        for batch in mixed_batches(max_batch, args.warmup_steps, args.seed):
            workers.command(f"step {batch}")
        workers.command("start_profile")
        for batch in mixed_batches(max_batch, args.steps, args.seed + 1):
            workers.command(f"step {batch}")
        workers.command("stop_profile")
        workers.command("exit")
        workers.join()
    except BaseException:
        workers.kill()
        raise
    return args.warmup_steps + args.steps


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        steps = serve(args)
    except WorkerError as error:
        print(f"vllm_style.py: {error}", file=sys.stderr)
        return 1
    print(f"done {steps} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
