"""Record which CUDA graph nodes each ``mark_kernels`` scope created during capture.

Annotations are keyed by graph node id (``graph_id << 32 | local_id``) and, once a
graph is instantiated, by its executable graph's id: the ``graph node id`` the profiler
writes for every kernel, memcpy and memset of a replay. The trace processor
(``cgfast.annotate_file`` / the ``cgfast`` CLI) joins them into traces.

Typical use::

    from cgfast import capture

    with capture.graph(g):                      # torch.cuda.graph(g) that records
        with capture.mark_kernels("attention"):
            y = attn(x)
    capture.save_annotations("annotations.json")

or ``with capture.recording(): ...`` around code that captures by itself (Inductor's
cudagraph trees, ``make_graphed_callables``, inference servers).

Ids come from ``cudaGraphNodeGetToolsId`` (cuda-bindings, CUDA >= 13.1 drivers) or from
CUPTI (``cuptiGetGraphNodeId``, CUDA 12.x and 13.0 drivers), chosen once on first use;
graphs are walked through ctypes on ``libcuda.so.1``. Without a GPU or an id source
every scope is a silent no-op and :func:`backend` says why.

What the capture layer keeps is owned by one object, ``_runtime.runtime``; every change
it makes to torch is made and undone in ``_patches``. Importing this package never
imports torch (nor chooses the backend): the functions that need torch import it when
they first run.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from cgfast import annotations as _annotation_files
from cgfast.capture._all_modules import AllModuleAnnotations, annotate_all_modules
from cgfast.capture._graphs import remap_to_exec_graph
from cgfast.capture._modules import ModuleAnnotations, annotate_modules
from cgfast.capture._op_counts import count_kernels
from cgfast.capture._patches import install, uninstall
from cgfast.capture._recording import (
    annotations_enabled,
    disable_annotations,
    enable_annotations,
    graph,
    recording,
)
from cgfast.capture._runtime import runtime as _runtime_state
from cgfast.capture._scopes import lane_for, mark_kernels, mark_stream

__all__ = [
    "AllModuleAnnotations",
    "ModuleAnnotations",
    "annotate_all_modules",
    "annotate_modules",
    "annotations_enabled",
    "backend",
    "clear_kernel_annotations",
    "count_kernels",
    "disable_annotations",
    "drop_graph_annotations",
    "enable_annotations",
    "get_graph_topology",
    "get_kernel_annotations",
    "get_kernel_launch_phases",
    "get_kernel_op_counts",
    "get_kernel_stacks",
    "graph",
    "install",
    "is_available",
    "lane_for",
    "load_annotations",
    "mark_kernels",
    "mark_stream",
    "recording",
    "remap_to_exec_graph",
    "resolve_pending_annotations",
    "save_annotations",
    "uninstall",
]


def is_available() -> bool:
    """Whether annotations can be recorded here (chooses the id source on first call)."""
    return _runtime_state.backend() is not None


def backend() -> str:
    """The id source in use (``"tools-id: ..."`` or ``"cupti: <libcupti path>"``), or
    ``"none: <why>"``."""
    return _runtime_state.describe()


def resolve_pending_annotations() -> None:
    """Merge the scopes recorded so far into :func:`get_kernel_annotations`."""
    _runtime_state.recorder.resolve()


def get_kernel_annotations() -> Mapping[int, List[Dict[str, Any]]]:
    """The live, read-only registry: node id -> list of annotation dicts."""
    return _runtime_state.recorder.annotations


def get_graph_topology() -> Dict[int, List[Dict[str, Any]]]:
    """Per executable graph id, its kernel/memcpy/memset nodes in local-id order:
    ``{"id", "type", "name", "deps", "grid", "block"}`` (a new dict on every call)."""
    return _runtime_state.recorder.topology()


def get_kernel_stacks() -> Dict[int, List[str]]:
    """Node id -> the user frames that launched it (``file:line:function``, innermost
    first), recorded with ``stacks=True`` (a new dict on every call). A node that a
    backward pass captured has the frames of the forward op whose gradient it computes
    (see :func:`get_kernel_launch_phases`)."""
    return _runtime_state.recorder.stacks()


def get_kernel_launch_phases() -> Dict[int, str]:
    """Node id -> ``"backward"`` for the nodes of :func:`get_kernel_stacks` that a
    backward pass captured (a new dict on every call)."""
    return _runtime_state.recorder.launch_phases()


def get_kernel_op_counts() -> Dict[int, Dict[str, int]]:
    """Node id -> ``{"flops": ..., "bytes": ...}`` of the op that created the node,
    recorded with ``flops=True`` (a new dict on every call): an op's counts are on its
    first node, 0 on its others."""
    return _runtime_state.recorder.op_counts()


def clear_kernel_annotations() -> None:
    """Forget every recorded annotation, pending scope and graph topology."""
    _runtime_state.recorder.clear()


def drop_graph_annotations(graph_ids: Union[int, Iterable[int]]) -> None:
    """Forget the annotations and topology of these (destroyed) graphs' ids."""
    _runtime_state.recorder.drop_graphs([graph_ids] if isinstance(graph_ids, int) else graph_ids)


def save_annotations(
    path: str | os.PathLike[str],
    annotations: Optional[Mapping[int, list]] = None,
    *,
    traces: Optional[Sequence[str]] = None,
) -> None:
    """Write annotations in the trace processor's format (gzip for ``.gz``), atomically.
    Without ``annotations``, the recorded ones (each node's op counts, when recorded, as
    one more dict item, last), graph topology and launch stacks.
    ``traces``: the paths of the traces this process exported, which ``cgfast annotate``
    then pairs with this file wherever they are (``cgfast run`` lists them)."""
    if annotations is None:
        recorder = _runtime_state.recorder
        recorded = dict(recorder.annotations)
        for node_id, counts in recorder.op_counts().items():
            recorded[node_id] = [*recorded.get(node_id, ()), counts]
        _annotation_files.save_annotations(
            path,
            recorded,
            graphs=recorder.topology(),
            stacks=recorder.stacks(),
            traces=traces,
            launch_phases=recorder.launch_phases(),
        )
    else:
        _annotation_files.save_annotations(path, annotations, traces=traces)


def load_annotations(path: str | os.PathLike[str]) -> Dict[int, list]:
    """Read node id -> annotations from a cgfast JSON file (or a PyTorch pickle)."""
    return _annotation_files.load_annotations(path)
