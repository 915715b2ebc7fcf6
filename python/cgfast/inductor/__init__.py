"""Make Inductor put ``cgfast.capture.mark_kernels`` brackets into generated code.

Importing this module registers ``torch._inductor.config.triton.
cudagraph_kernel_annotations`` (default False; ``CGFAST_INDUCTOR_ANNOTATIONS=1``
turns the default on). With it on, the Python wrapper brackets every kernel launch
(Triton, C++, extern and fallback kernels) with a ``mark_kernels`` scope whose
annotation names the FX nodes (``name``), the ``nn.Module`` path (``module``), the
``torch.fx.traceback.annotate`` keys and, in backward graphs, ``autograd_phase``.
With ``triton.cudagraph_kernel_flops`` on too (``CGFAST_INDUCTOR_FLOPS=1``), each
bracket also holds a ``cgfast.capture.count_kernels`` scope with Inductor's estimates
of the kernel's FLOPs (matmul and convolution templates and extern kernels) and of the
bytes it reads and writes.
Cudagraph-tree recordings (and ``triton.cudagraph_trees=False`` captures) then run
under ``cgfast.capture.recording()``, so the brackets are recorded per executable graph.

The option takes part in Inductor's FX-graph and AOTAutograd cache keys, together
with a digest of this package's code. Dynamo's frame cache does not guard on Inductor
options: set the option before the first compile, pass it through
``torch.compile(..., options={"triton.cudagraph_kernel_annotations": True})``, or call
``torch._dynamo.reset()`` after changing it.
"""

from __future__ import annotations

from cgfast.inductor._config import CODEGEN_VERSION_KEY, ENV_VAR, FLOPS_ENV_VAR, FLOPS_KEY, TOGGLE_KEY
from cgfast.inductor._install import UnsupportedTorchError, install

__all__ = [
    "CODEGEN_VERSION_KEY",
    "ENV_VAR",
    "FLOPS_ENV_VAR",
    "FLOPS_KEY",
    "TOGGLE_KEY",
    "UnsupportedTorchError",
    "install",
]

install()
