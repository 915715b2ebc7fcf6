"""Profile a small Hugging Face Llama (random weights) on a CUDA GPU and write the
annotated trace with ``cgfast.profiler.trace_handler``: the real traces behind the
``cgfast diff`` tests (``tests/data/diff``).

    python tools/profile_llama_gpu.py OUT_DIR [--compiled] [--wide-mlp LAYER]
                                               [--inductor KEY=VALUE] [--steps 4 --replays 10]

Eager (default): ``annotate_modules`` around one ``torch.cuda.graph`` capture of the
forward. ``--compiled``: ``torch.compile(mode="reduce-overhead")`` with
``triton.cudagraph_kernel_annotations`` on (cudagraph trees record the brackets).
``--wide-mlp L`` doubles layer L's MLP width (the change a diff must find);
``--inductor`` sets an Inductor option before compiling. The profiler runs with a
schedule and ``prof.step()`` (one wait, two warm-up and ``--steps`` active steps of
``--replays`` replays each), so Holistic Trace Analysis can read the trace too.
"""

from __future__ import annotations

import argparse
import ast
import json
import os

import torch
import transformers

from cgfast import capture
from cgfast.profiler import trace_handler

VOCAB, BATCH, SEQ = 4096, 8, 128


def llama(wide_mlp: int | None) -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=512,
        intermediate_size=1024,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=SEQ,
        use_cache=False,
    )
    model = transformers.LlamaForCausalLM(config)
    if wide_mlp is not None:
        wide = transformers.LlamaConfig(
            **{**config.to_dict(), "intermediate_size": 4 * config.intermediate_size}
        )
        model.model.layers[wide_mlp].mlp = type(model.model.layers[wide_mlp].mlp)(wide)
    return model.cuda().eval()


def eager_step(model: torch.nn.Module, ids: torch.Tensor):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(3):
            model(input_ids=ids)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with capture.annotate_modules(model), torch.no_grad(), torch.cuda.graph(graph):
        model(input_ids=ids)
    return graph.replay


def compiled_step(model: torch.nn.Module, ids: torch.Tensor):
    compiled = torch.compile(model, mode="reduce-overhead")

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        with torch.no_grad():
            compiled(input_ids=ids)

    for _ in range(3):  # warm-up, recording, first replay
        step()
    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--compiled", action="store_true")
    parser.add_argument("--wide-mlp", type=int)
    parser.add_argument("--inductor", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--replays", type=int, default=10)
    args = parser.parse_args()
    inductor = {k: ast.literal_eval(v) for k, v in (o.split("=", 1) for o in args.inductor)}

    if args.compiled:
        from torch._inductor import config

        import cgfast.inductor

        for key, value in {cgfast.inductor.TOGGLE_KEY: True, **inductor}.items():
            obj, _, name = key.rpartition(".")
            setattr(config if not obj else getattr(config, obj), name, value)
    model = llama(args.wide_mlp)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), device="cuda")
    step = compiled_step(model, ids) if args.compiled else eager_step(model, ids)
    for _ in range(20):
        step()
    torch.cuda.synchronize()

    handler = trace_handler(args.out)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    schedule = torch.profiler.schedule(wait=1, warmup=2, active=args.steps)
    with torch.profiler.profile(activities=activities, schedule=schedule, on_trace_ready=handler) as prof:
        for _ in range(1 + 2 + args.steps):
            for _ in range(args.replays):
                step()
            torch.cuda.synchronize()
            prof.step()
    result = dict(handler.annotate_result)
    result = {k: v for k, v in result.items() if isinstance(v, (int, float, str, type(None)))}
    print(
        json.dumps(
            {
                "out": args.out,
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "gpu": torch.cuda.get_device_name(),
                "inductor": inductor,
                **result,
            }
        )
    )
    with open(os.path.join(args.out, "run.json"), "w") as file:
        json.dump(
            {
                "argv": vars(args),
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "gpu": torch.cuda.get_device_name(),
                **result,
            },
            file,
            indent=1,
        )


if __name__ == "__main__":
    main()
