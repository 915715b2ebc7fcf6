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


def report(results: str, role: str) -> None:
    import torch  # noqa: F401  (cgfast's recording starts when torch is imported)
    import torch.profiler.profiler as profiler

    from cgfast.capture._runtime import runtime

    state = {
        "role": role,
        "pid": os.getpid(),
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
