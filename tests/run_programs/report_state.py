"""A program run under ``cgfast run`` by tests/test_run.py: each process it starts (the
program itself, multiprocessing children by spawn, fork and forkserver, a subprocess,
torchrun's workers) writes what cgfast set up in it to RESULTS/<pid>.json.

    python report_state.py RESULTS [spawn|fork|forkserver|subprocess|none]
"""

import json
import multiprocessing
import os
import subprocess
import sys


def begin_a_capture(torch) -> None:
    """What the program's first ``torch.cuda.graph`` does: cgfast run's recording starts
    in ``torch.cuda.CUDAGraph.capture_begin``, before torch's own (which, given no graph,
    then fails, as it would on a machine without CUDA)."""
    try:
        torch.cuda.CUDAGraph.capture_begin(None)
    except Exception:
        pass


def report(results: str, role: str) -> None:
    import torch  # cgfast run waits for the first capture once torch is imported
    import torch.profiler.profiler as profiler

    capture_begin = torch.cuda.CUDAGraph.__dict__["capture_begin"]
    before_capture = {
        "waiting_for_a_capture": capture_begin.__qualname__.startswith("_before_first_capture"),
        "capture_layer_imported": "cgfast.capture" in sys.modules,
    }
    begin_a_capture(torch)
    from cgfast.capture._runtime import runtime

    state = {
        "role": role,
        "pid": os.getpid(),
        "before_capture": before_capture,
        "recording": runtime.enabled,
        "modules_named": runtime.module_naming is not None,
        "exports_saved": getattr(profiler._KinetoProfile.export_chrome_trace, "_cgfast_run", False),
        "id_source_chosen": runtime.backend_chosen,
        "inherited_annotations": len(runtime.recorder.annotations),
    }
    with open(os.path.join(results, f"{os.getpid()}.json"), "w") as f:
        json.dump(state, f)


def main() -> None:
    results, how = sys.argv[1], sys.argv[2]
    report(results, "program")
    if how == "subprocess":
        subprocess.run([sys.executable, __file__, results, "none"], check=True)
    elif how != "none":
        child = multiprocessing.get_context(how).Process(target=report, args=(results, how))
        child.start()
        child.join()
        if child.exitcode != 0:
            sys.exit(f"child failed: {child.exitcode}")


if __name__ == "__main__":
    main()
