"""FLOPs and bytes recorded at capture (``flops=True``) against independent truths on a
real GPU: per-module FLOPs of a Hugging Face Llama and a timm ResNet-50 equal
``FlopCounterMode``'s of an eager run; the achieved TFLOP/s ``summary --efficiency``
gives a module that is one large GEMM is within 10% of the same GEMM timed with CUDA
events; the bytes of an elementwise module are within 10% of Nsight Compute's DRAM bytes
for its kernels (``ncu --graph-profiling node``).

Set ``CGFAST_E2E_OUT`` to a directory to keep the figures."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")

import cgfast  # noqa: E402
from cgfast import capture  # noqa: E402
from test_capture_flops import flop_counter_by_module, flops_by_module  # noqa: E402
from test_modules_gpu import warm_up  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_registry")
FIGURES = {}
NCU = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"


def write_figures():
    out = os.environ.get("CGFAST_E2E_OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "flops_truth_gpu.json"), "w") as f:
            json.dump(FIGURES, f, indent=2, sort_keys=True)


def capture_forward(model, x, **handle):
    warm_up(model, x)
    g = torch.cuda.CUDAGraph()
    with capture.annotate_modules(model, flops=True, **handle), torch.no_grad(), torch.cuda.graph(g):
        model(x)
    return g


def exec_id() -> int:
    """The executable graph of the one capture recorded."""
    (graph,) = {node_id >> 32 for node_id in capture.get_kernel_op_counts()}
    return graph


def llama():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return transformers.LlamaForCausalLM(config).cuda().eval()


@pytest.mark.parametrize(
    "make,inputs",
    [
        (
            lambda: timm.create_model("resnet50", pretrained=False).cuda().eval(),
            lambda: torch.randn(4, 3, 224, 224),
        ),
        (llama, lambda: torch.randint(0, 256, (2, 32))),
    ],
    ids=["resnet50", "llama"],
)
def test_module_flops_equal_flop_counter_modes_on_the_gpu(make, inputs):
    model = make()
    x = inputs().cuda()

    def forward():
        with torch.no_grad():
            model(x)

    expected, expected_total = flop_counter_by_module(model, forward)
    capture_forward(model, x)
    capture.resolve_pending_annotations()
    got, total = flops_by_module(model, exec_id())
    FIGURES[f"{type(model).__name__}_flops"] = {"capture_total": total, "flop_counter_total": expected_total}
    write_figures()
    assert expected_total > 0 and total == expected_total
    assert got == expected and len(expected) > 10


def profile_replays(g, path, replays=10):
    torch.cuda.synchronize()
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        for _ in range(replays):
            g.replay()
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))


def test_a_gemm_modules_achieved_tflops_match_cuda_events(tmp_path):
    class Gemm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8192, 8192, bias=False)

        def forward(self, x):
            return self.proj(x)

    model = Gemm().cuda().to(torch.bfloat16)
    x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    g = capture_forward(model, x)
    annotations = tmp_path / "annotations.json"
    capture.save_annotations(annotations)
    trace = tmp_path / "trace.json"
    profile_replays(g, trace)
    out = tmp_path / "trace.annotated.json"
    cgfast.annotate_file(str(trace), annotations=str(annotations), output=str(out))
    report = cgfast.summary_report(str(out), by="module", efficiency=True)
    row = next(r for r in report["efficiency"]["rows"] if r["value"] == "proj")

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    with torch.no_grad():
        for _ in range(10):
            start.record()
            model(x)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    times.sort()
    events_tflops = 2 * 8192**3 / (times[len(times) // 2] * 1e-3) / 1e12
    FIGURES["gemm_8192_bf16"] = {"summary_tflops": row["tflops"], "cuda_events_tflops": events_tflops}
    write_figures()
    assert abs(row["tflops"] / events_tflops - 1) < 0.10


NCU_PROGRAM = textwrap.dedent(
    """
    import json, sys, torch
    from cgfast import capture

    class Scale(torch.nn.Module):
        def forward(self, x):
            return x * 2.0

    model = Scale().cuda()
    x = torch.randn(64 * 1024 * 1024, device="cuda")
    model(x)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with capture.annotate_modules(model, flops=True), torch.no_grad(), torch.cuda.graph(g):
        model(x)
    capture.resolve_pending_annotations()
    nbytes = sum(c["bytes"] for c in capture.get_kernel_op_counts().values())
    json.dump({"bytes": nbytes}, open(sys.argv[1], "w"))
    g.replay()
    torch.cuda.synchronize()
    """
)


@pytest.mark.skipif(not os.path.exists(NCU), reason="no Nsight Compute (ncu)")
def test_an_elementwise_modules_bytes_match_nsight_computes_dram_bytes(tmp_path):
    """The program runs twice: plainly, recording its counts (under ncu, which holds
    CUPTI, cgfast has no id source), then under ncu, which profiles its graph's node."""
    program = tmp_path / "scale.py"
    program.write_text(NCU_PROGRAM)
    counts = tmp_path / "counts.json"
    recorded = subprocess.run([sys.executable, str(program), str(counts)], capture_output=True, text=True)
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    done = subprocess.run(
        [
            NCU,
            "--graph-profiling",
            "node",
            "--metrics",
            "dram__bytes_read.sum,dram__bytes_write.sum",
            "--csv",
            "--print-units",
            "base",
            sys.executable,
            str(program),
            str(tmp_path / "under_ncu.json"),
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = list(csv.DictReader(io.StringIO(done.stdout[done.stdout.index('"ID"') :])))
    # the last kernel profiled is the graph's (the eager call before the capture is the first)
    by_kernel = {}
    for r in rows:
        by_kernel.setdefault(r["ID"], {})[r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
    last = by_kernel[max(by_kernel, key=int)]
    dram = last["dram__bytes_read.sum"] + last["dram__bytes_write.sum"]
    nbytes = json.loads(counts.read_text())["bytes"]
    FIGURES["elementwise_256MB"] = {"recorded_bytes": nbytes, "ncu_dram_bytes": dram}
    write_figures()
    assert nbytes == 2 * 64 * 1024 * 1024 * 4  # its input and its output
    assert abs(nbytes / dram - 1) < 0.10
