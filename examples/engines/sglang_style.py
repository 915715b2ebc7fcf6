"""An SGLang-style server: one scheduler process per GPU, each with its own CUDA-graph runner
over an eager Hugging Face model.

It imitates SGLang's launcher and ``Scheduler``. The launcher starts ``--schedulers``
scheduler processes, with ``multiprocessing`` (``--start spawn``, the default, as SGLang
does; ``forkserver`` and ``fork`` too) or by re-executing this file with ``subprocess``
(``--start subprocess``). Each scheduler builds a 2-layer Llama with random weights, eager
(not compiled), on GPU ``rank % device_count``, and a ``CudaGraphRunner`` that captures one
CUDA graph of the model's forward per batch size (largest first, sharing one memory pool)
over static ``input_ids``/``positions`` buffers. It then serves a fixed list of requests,
each padded to the smallest captured batch size that holds it and replayed. With
``--trace-dir`` (default: ``$SGLANG_TORCH_PROFILER_DIR``) the scheduler profiles a few of
its steps with ``torch.profiler.profile``, exporting through
``tensorboard_trace_handler(TRACE_DIR)`` (``--export handler``, the default) or, as SGLang
itself does, with ``export_chrome_trace(TRACE_DIR/<time>-TP-<rank>.trace.json.gz)``
(``--export chrome``).

    python examples/engines/sglang_style.py --trace-dir DIR [--schedulers 1] [--start subprocess]
    python examples/engines/sglang_style.py --trace-dir DIR --device cpu    # no GPU: no capture

``--device cpu`` keeps the processes and the profiler and runs the model eagerly. stdout
gets one line, ``done N requests``; a failing scheduler makes the launcher exit with
status 1.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import subprocess
import sys
import time

import torch
import transformers

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


def parse_args(argv: list) -> argparse.Namespace:
    parser = OneLineErrorParser(prog="sglang_style.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trace-dir",
        default=os.environ.get("SGLANG_TORCH_PROFILER_DIR"),
        help="profile the schedulers into this directory (default: $SGLANG_TORCH_PROFILER_DIR; none: no profile)",
    )
    parser.add_argument(
        "--export", choices=["handler", "chrome"], default="handler", help="how traces are written"
    )
    parser.add_argument("--schedulers", type=positive_int, default=1, help="scheduler processes (default 1)")
    parser.add_argument("--start", choices=["spawn", "forkserver", "fork", "subprocess"], default="spawn")
    parser.add_argument("--batch-sizes", type=batch_sizes, default=[1, 2, 4, 8], help="captured batch sizes")
    parser.add_argument("--requests", type=positive_int, default=12, help="requests each scheduler serves")
    parser.add_argument("--profile-start", type=int, default=4, help="first profiled request (default 4)")
    parser.add_argument("--profile-steps", type=positive_int, default=8, help="profiled requests (default 8)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--role", choices=["launcher", "scheduler"], default="launcher", help=argparse.SUPPRESS
    )
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not 0 <= args.profile_start < args.requests:
        parser.error(f"--profile-start must be in [0, --requests): {args.profile_start}")
    return args


# --- the scheduler: model, graph runner, requests, profiler ---


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


class CudaGraphRunner:
    """SGLang's ``CudaGraphRunner``: static ``input_ids``/``positions`` buffers for the largest
    batch, one CUDA graph of the forward per batch size over their first rows. Without CUDA
    graphs (on CPU) the same buffers go through the eager model."""

    def __init__(self, model: torch.nn.Module, sizes: list, device: torch.device):
        self.model = model
        self.sizes = sizes
        self.input_ids = torch.zeros(sizes[-1], SEQ_LEN, dtype=torch.long, device=device)
        self.positions = torch.arange(SEQ_LEN, device=device).expand(sizes[-1], -1).contiguous()
        self.graphs = {}
        self.logits = {}
        if device.type == "cuda":
            pool = torch.cuda.graph_pool_handle()
            for size in reversed(sizes):  # largest first: the smaller ones reuse its memory
                self._capture(size, pool)

    def _forward(self, size: int) -> torch.Tensor:
        return self.model(input_ids=self.input_ids[:size], position_ids=self.positions[:size]).logits

    def _capture(self, size: int, pool) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm up outside the capture, as torch.cuda.graph asks
                self._forward(size)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            self.logits[size] = self._forward(size)
        self.graphs[size] = graph

    def padded_size(self, batch: int) -> int:
        for size in self.sizes:
            if size >= batch:
                return size
        raise ValueError(f"batch {batch} is larger than the largest captured size {self.sizes[-1]}")

    def forward(self, prompts: torch.Tensor) -> torch.Tensor:
        """The logits of the last position of each prompt (a ``batch x SEQ_LEN`` tensor)."""
        batch = prompts.shape[0]
        size = self.padded_size(batch)
        self.input_ids[:batch].copy_(prompts)
        if size in self.graphs:
            self.graphs[size].replay()
            logits = self.logits[size]
        else:
            logits = self._forward(size)
        return logits[:batch, -1]


def request_batches(count: int, sizes: list, seed: int) -> list:
    """The fixed list of requests: ``count`` batches of random prompts, in shuffled rounds
    that pad to each captured size once (a batch of 3 pads to 4)."""
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    smaller = dict(zip(sizes, [0, *sizes]))
    batches = []
    while len(batches) < count:
        round_ = list(sizes)
        rng.shuffle(round_)
        batches.extend(rng.randint(smaller[size] + 1, size) for size in round_)
    return [torch.randint(0, VOCAB, (batch, SEQ_LEN), generator=generator) for batch in batches[:count]]


class Profiler:
    """The scheduler's torch profiler switch, exporting as ``--export`` says."""

    def __init__(self, args: argparse.Namespace, device: torch.device):
        self.args = args
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        on_trace_ready = None
        if args.export == "handler":
            on_trace_ready = torch.profiler.tensorboard_trace_handler(args.trace_dir)
        self.profiler = torch.profiler.profile(activities=activities, on_trace_ready=on_trace_ready)

    def start(self):
        self.profiler.start()

    def stop(self):
        self.profiler.stop()
        if self.args.export == "chrome":
            os.makedirs(self.args.trace_dir, exist_ok=True)
            name = f"{time.time()}-TP-{self.args.rank}.trace.json.gz"
            self.profiler.export_chrome_trace(os.path.join(self.args.trace_dir, name))


def run_scheduler(args: argparse.Namespace) -> None:
    """One scheduler: build, capture, then serve the requests, profiling some of them."""
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("--device cuda, but CUDA is not available")
        device = torch.device("cuda", args.rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    torch.manual_seed(args.seed)
    with torch.no_grad():
        runner = CudaGraphRunner(build_model(device), args.batch_sizes, device)
        profiler = Profiler(args, device) if args.trace_dir else None
        last_profiled = min(args.profile_start + args.profile_steps, args.requests) - 1
        requests = request_batches(args.requests, args.batch_sizes, args.seed)
        for step, prompts in enumerate(requests):
            if profiler and step == args.profile_start:
                profiler.start()
            runner.forward(prompts.to(device)).argmax(-1).tolist()  # the next tokens, on the CPU
            if profiler and step == last_profiled:
                profiler.stop()


# --- the launcher ---


def start_schedulers(args: argparse.Namespace, argv: list) -> list:
    """One process per scheduler: ``multiprocessing.Process`` or ``subprocess.Popen``."""
    if args.start == "subprocess":
        return [
            subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), *argv, "--role", "scheduler", "--rank", str(rank)]
            )
            for rank in range(args.schedulers)
        ]
    context = multiprocessing.get_context(args.start)
    processes = []
    for rank in range(args.schedulers):
        scheduler_args = argparse.Namespace(**{**vars(args), "role": "scheduler", "rank": rank})
        process = context.Process(target=run_scheduler, args=(scheduler_args,), name=f"scheduler{rank}")
        process.start()
        processes.append(process)
    return processes


def wait_for(process) -> int:
    """The exit status of a ``multiprocessing.Process`` or a ``subprocess.Popen``."""
    if isinstance(process, subprocess.Popen):
        return process.wait()
    process.join()
    return process.exitcode


def stop(process) -> None:
    process.kill()
    wait_for(process)


def launch(args: argparse.Namespace, argv: list) -> int:
    """Starts the schedulers and waits for them; 0 when all succeeded, else 1."""
    schedulers = start_schedulers(args, argv)
    try:
        for rank, process in enumerate(schedulers):
            status = wait_for(process)
            if status != 0:
                print(f"sglang_style.py: scheduler {rank} failed (exit status {status})", file=sys.stderr)
                for other in schedulers[rank + 1 :]:
                    stop(other)
                return 1
    except BaseException:
        for process in schedulers:
            stop(process)
        raise
    print(f"done {args.requests} requests")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.role == "scheduler":
        run_scheduler(args)
        return 0
    return launch(args, argv)


if __name__ == "__main__":
    sys.exit(main())
