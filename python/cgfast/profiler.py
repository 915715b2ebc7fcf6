"""PyTorch profiler integration.

``trace_handler(dir)`` is an ``on_trace_ready`` callable like
``torch.profiler.tensorboard_trace_handler``: it exports the Chrome trace, saves the
recorded CUDA-graph annotations next to it and writes the annotated trace::

    with torch.profiler.profile(..., on_trace_ready=cgfast.profiler.trace_handler("traces")):
        ...

Files, for rank R (``torch.distributed`` rank, else 0):

* ``{R:06d}.{host}_{pid}.{ns}.pt.trace.json[.gz]``: the trace (the leading rank digits
  let the ``cgfast`` CLI find the annotations by itself);
* ``kernel_annotations_rank{R}_{pid}.json``: annotations and graph topology;
* ``{...}.pt.trace.annotated.json[.gz]``: the annotated trace, from the Rust core.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any, Optional

from cgfast._cgfast import DEFAULTS
from cgfast.reports import Lanes


def distributed_rank() -> int:
    """This process's ``torch.distributed`` rank, or 0 outside a process group."""
    try:
        import torch.distributed as dist
    except ImportError:
        return 0
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0


def default_worker_name(rank: Optional[int] = None) -> str:
    """``{rank:06d}.{hostname}_{pid}``."""
    if rank is None:
        rank = distributed_rank()
    return f"{rank:06d}.{socket.gethostname()}_{os.getpid()}"


class TraceHandler:
    """The callable :func:`trace_handler` returns; it remembers the files it last wrote."""

    def __init__(
        self,
        dir_name: str | os.PathLike[str],
        worker_name: Optional[str] = None,
        use_gzip: bool = True,
        *,
        spans: Optional[str] = DEFAULTS["spans"],
        lanes: Lanes = DEFAULTS["lanes"],
    ) -> None:
        dir_name = os.fspath(dir_name)
        if not dir_name:
            raise ValueError("trace_handler needs a directory name")
        self.dir_name = dir_name
        self.worker_name = worker_name
        self.use_gzip = use_gzip
        self.spans = spans
        self.lanes = lanes
        self.trace_path: Optional[str] = None
        self.annotations_path: Optional[str] = None
        self.annotate_result: Any = None

    def __call__(self, prof: Any) -> None:
        import cgfast
        from cgfast import capture

        os.makedirs(self.dir_name, exist_ok=True)
        rank = distributed_rank()
        worker = self.worker_name or default_worker_name(rank)
        suffix = ".pt.trace.json.gz" if self.use_gzip else ".pt.trace.json"
        trace_path = os.path.join(self.dir_name, f"{worker}.{time.time_ns()}{suffix}")
        prof.export_chrome_trace(trace_path)
        annotations_path = os.path.join(self.dir_name, f"kernel_annotations_rank{rank}_{os.getpid()}.json")
        capture.save_annotations(annotations_path)
        self.annotate_result = cgfast.annotate_file(
            trace_path, annotations=annotations_path, output=None, spans=self.spans, lanes=self.lanes
        )
        self.trace_path = trace_path
        self.annotations_path = annotations_path


def trace_handler(
    dir_name: str | os.PathLike[str],
    worker_name: Optional[str] = None,
    use_gzip: bool = True,
    *,
    spans: Optional[str] = DEFAULTS["spans"],
    lanes: Lanes = DEFAULTS["lanes"],
) -> TraceHandler:
    """An ``on_trace_ready`` callable writing trace, annotations and annotated trace
    into ``dir_name``; ``spans`` is the annotation key whose scopes get spans (None: none),
    ``lanes`` ("all", "none" or "reference", as ``cgfast annotate --lanes``) whether
    graphed events move to their annotated lanes."""
    return TraceHandler(dir_name, worker_name, use_gzip, spans=spans, lanes=lanes)
