"""Install the toggle into the running torch; see ``cgfast.inductor``."""

from __future__ import annotations

import importlib
import threading

SUPPORTED = "torch 2.11 to 2.15"

# Everything cgfast.inductor touches in torch, checked before anything is changed.
HOOK_POINTS = (
    ("torch.utils._config_module", "_Config"),
    ("torch.utils._config_module", "_ConfigEntry"),
    ("torch._inductor.config", "_config"),
    ("torch._inductor.config", "triton"),
    ("torch._inductor.codegen.common", "init_backend_registration"),
    ("torch._inductor.codegen.common", "register_backend_for_device"),
    ("torch._inductor.codegen.common", "device_codegens"),
    ("torch._inductor.codegen.common", "custom_backend_passes"),
    ("torch._inductor.codegen.common", "custom_backend_codegen_configs"),
    ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.create"),
    ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.writeline"),
    ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.generate_kernel_call"),
    ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.generate_extern_kernel_out"),
    ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.generate_extern_kernel_alloc"),
    ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.generate_fallback_kernel"),
    (
        "torch._inductor.codegen.wrapper",
        "PythonWrapperCodegen.generate_fallback_kernel_with_runtime_lookup",
    ),
    ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.generate_scatter_fallback"),
    ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.generate_index_put_fallback"),
    ("torch._inductor.codegen.wrapper", "PythonWrapperCodegen.codegen_device_copy"),
    ("torch._inductor.codegen.wrapper", "SubgraphPythonWrapperCodegen"),
    ("torch._inductor.scheduler", "Scheduler.codegen_extern_call"),
    ("torch._inductor.virtualized", "V"),
    ("torch._inductor.cudagraph_trees", "CUDAGraphNode._record"),
    ("torch._inductor.compile_fx", "cudagraphify_impl"),
    ("torch._inductor.codecache", "FxGraphHashDetails.__init__"),
    ("torch._functorch._aot_autograd.autograd_cache", "AOTAutogradCacheDetails.__init__"),
)


class UnsupportedTorchError(RuntimeError):
    """This torch lacks a point that cgfast.inductor hooks into."""


def _missing_hook_points() -> list[str]:
    missing = []
    for module_name, attribute_path in HOOK_POINTS:
        try:
            found = importlib.import_module(module_name)
            for attribute in attribute_path.split("."):
                found = getattr(found, attribute)
        except (ImportError, AttributeError):
            missing.append(f"{module_name}.{attribute_path}")
    return missing


def _check_torch() -> None:
    import torch

    missing = _missing_hook_points()
    if missing:
        raise UnsupportedTorchError(
            f"cgfast.inductor does not support torch {torch.__version__} "
            f"({SUPPORTED} are supported): it lacks {', '.join(missing)}"
        )


def _register_wrappers() -> None:
    """Put the annotating wrapper in place of torch's generic Python wrapper for every
    device using it (cpu and cuda among them), keeping the rest of each entry."""
    import torch
    from torch._inductor.codegen import common
    from torch._inductor.codegen.wrapper import PythonWrapperCodegen

    from cgfast.inductor._wrapper import AnnotatingPythonWrapperCodegen

    common.init_backend_registration()
    replaced = []
    for device, entry in list(common.device_codegens.items()):
        if entry.wrapper_codegen is AnnotatingPythonWrapperCodegen:
            replaced.append(device)
        elif entry.wrapper_codegen is PythonWrapperCodegen:
            common.register_backend_for_device(
                device,
                entry.scheduling,
                AnnotatingPythonWrapperCodegen,
                entry.cpp_wrapper_codegen,
                entry.fx_wrapper_codegen,
                common.custom_backend_passes.get(device),
                common.custom_backend_codegen_configs.get(device),
            )
            replaced.append(device)
    absent = {"cpu", "cuda"} - set(replaced)
    if absent:
        raise UnsupportedTorchError(
            f"cgfast.inductor does not support torch {torch.__version__} "
            f"({SUPPORTED} are supported): the Python wrapper of "
            f"{', '.join(sorted(absent))} is not torch's PythonWrapperCodegen"
        )


_lock = threading.Lock()
_state = {"installed": False, "native": False}


def install() -> bool:
    """Register ``triton.cudagraph_kernel_annotations`` and the codegen and capture
    hooks behind it. Idempotent. Returns False, changing nothing, when this torch
    defines the option itself: then torch annotates and cgfast stays out of the way.
    Raises ``UnsupportedTorchError`` when a point it hooks into is missing."""
    with _lock:
        if _state["installed"]:
            return not _state["native"]
        from cgfast.inductor import _config

        if _config.torch_defines_toggle():
            _state.update(installed=True, native=True)
            return False
        _check_torch()
        from cgfast.inductor import _cache_key, _cudagraphs, _wrapper

        _config.register_entries()
        _register_wrappers()
        _wrapper.install_scheduler_hook()
        _cudagraphs.install()
        _cache_key.install()
        _state["installed"] = True
        return True
