"""The two sources of graph node ids.

* ``tools-id``: ``cudaGraphNodeGetToolsId`` / ``cudaGraphGetId`` / ``cudaGraphExecGetId``
  from cuda-bindings; needs a CUDA >= 13.1 driver.
* ``cupti``: ``cuptiGetGraphNodeId`` / ``cuptiGetGraphId`` / ``cuptiGetGraphExecId``
  through ctypes; works on CUDA 12.x and 13.0 drivers. These calls take no CUPTI
  subscription, so they coexist with the PyTorch profiler.

Both give ``graph_id << 32 | local_id``, the ``graph node id`` a profiler reports. Each
source is tried on a throwaway graph before it is used (``verify``).
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import threading
from typing import List, Optional

from cgfast.capture._libcuda import ProbeGraph


class IdSourceUnavailable(Exception):
    """Why a source of ids cannot be used here."""


def verify(source, probe: ProbeGraph) -> None:
    """Check that ``source`` numbers the probe graph's node inside that graph's id."""
    try:
        graph_id = source.graph_id(probe.graph)
        node_id = source.node_id(probe.node)
        if probe.graph_exec is not None:
            source.exec_id(probe.graph_exec)
    except RuntimeError as exc:
        raise IdSourceUnavailable(str(exc)) from exc
    except Exception as exc:  # a binding that does not take what it is given
        raise IdSourceUnavailable(f"{type(exc).__name__}: {exc}") from exc
    if node_id >> 32 != graph_id:
        raise IdSourceUnavailable(f"node id {node_id:#x} is not in graph {graph_id}")


def agree(first, second, probe: ProbeGraph) -> Optional[str]:
    """``None`` when both sources give the probe the same ids, else what differs."""
    pairs = [
        ("graph id", first.graph_id(probe.graph), second.graph_id(probe.graph)),
        ("node id", first.node_id(probe.node), second.node_id(probe.node)),
    ]
    if probe.graph_exec is not None:
        pairs.append(("exec id", first.exec_id(probe.graph_exec), second.exec_id(probe.graph_exec)))
    for what, a, b in pairs:
        if a != b:
            return f"{what}: {first.name} says {a:#x}, {second.name} says {b:#x}"
    return None


class ToolsIdSource:
    name = "tools-id"

    def __init__(self) -> None:
        try:
            from cuda.bindings import runtime
        except ImportError as exc:
            raise IdSourceUnavailable(f"cuda-bindings is not installed ({exc})") from exc
        missing = [
            fn
            for fn in ("cudaGraphNodeGetToolsId", "cudaGraphGetId", "cudaGraphExecGetId")
            if not hasattr(runtime, fn)
        ]
        if missing:
            raise IdSourceUnavailable(f"cuda-bindings lacks {', '.join(missing)} (needs >= 13.1)")
        self._runtime = runtime
        self._node_id = runtime.cudaGraphNodeGetToolsId
        self._graph_id = runtime.cudaGraphGetId
        self._exec_id = runtime.cudaGraphExecGetId
        self._success = runtime.cudaError_t.cudaSuccess
        self.description = "tools-id: cudaGraphNodeGetToolsId (cuda-bindings)"

    def _value(self, call: str, result) -> int:
        if result[0] != self._success:
            raise RuntimeError(f"{call} failed: {getattr(result[0], 'name', result[0])}")
        return int(result[1])

    def node_id(self, node: int) -> int:
        return self._value("cudaGraphNodeGetToolsId", self._node_id(node))

    def graph_id(self, graph: int) -> int:
        return self._value("cudaGraphGetId", self._graph_id(graph))

    def exec_id(self, graph_exec: int) -> int:
        return self._value("cudaGraphExecGetId", self._exec_id(graph_exec))


class CuptiIdSource:
    name = "cupti"

    def __init__(self, path: str) -> None:
        try:
            lib = ctypes.CDLL(path)
            self._node_id = lib.cuptiGetGraphNodeId
            self._graph_id = lib.cuptiGetGraphId
            self._exec_id = lib.cuptiGetGraphExecId
        except (OSError, AttributeError) as exc:
            raise IdSourceUnavailable(f"{path}: {exc}") from exc
        self._node_id.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64)]
        self._graph_id.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
        self._exec_id.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32)]
        for fn in (self._node_id, self._graph_id, self._exec_id):
            fn.restype = ctypes.c_int
        # as loaded: the native graph walk looks cuptiGetGraphNodeId up in this library
        self.path = path
        self.description = f"cupti: {path}"
        self._scratch = threading.local()

    @staticmethod
    def _value(call: str, code: int, out) -> int:
        if code != 0:
            raise RuntimeError(f"{call} failed: CUptiResult {code}")
        return out.value

    def node_id(self, node: int) -> int:
        # asked once per node at capture end: a per-thread out-parameter made once
        scratch = self._scratch
        out = getattr(scratch, "node_id", None)
        if out is None:
            value = ctypes.c_uint64()
            out = scratch.node_id = (value, ctypes.byref(value))
        code = self._node_id(node, out[1])
        if code:
            self._value("cuptiGetGraphNodeId", code, out[0])
        return out[0].value

    def graph_id(self, graph: int) -> int:
        out = ctypes.c_uint32()
        return self._value("cuptiGetGraphId", self._graph_id(graph, ctypes.byref(out)), out)

    def exec_id(self, graph_exec: int) -> int:
        out = ctypes.c_uint32()
        return self._value("cuptiGetGraphExecId", self._exec_id(graph_exec, ctypes.byref(out)), out)


def libcupti_candidates(cuda_major: Optional[int] = None) -> List[str]:
    """Where libcupti may be, best first: a copy already loaded into this process (the
    PyTorch profiler's; never load a second one beside it), the ``nvidia-cuda-cupti``
    wheel, torch's own libraries, ``CUDA_HOME``/``CUDA_PATH``, then the loader's path.
    Files whose soname major matches ``cuda_major`` go first within each group."""
    groups = [
        _loaded_libcupti(),
        _wheel_libcupti(),
        _torch_libcupti(),
        _toolkit_libcupti(),
    ]
    seen = set()
    ordered = []
    for group in groups:
        if cuda_major is not None:
            group = sorted(group, key=lambda path: f".so.{cuda_major}" not in os.path.basename(path))
        for path in group:
            real = os.path.realpath(path)
            if real not in seen and os.path.isfile(real):
                seen.add(real)
                ordered.append(path)
    loader_names = [f"libcupti.so.{major}" for major in dict.fromkeys([cuda_major, 13, 12]) if major]
    return ordered + loader_names + ["libcupti.so"]


def _loaded_libcupti() -> List[str]:
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libcupti" in line and "/" in line}
    except OSError:
        return []
    return sorted(path for path in paths if os.path.basename(path).startswith("libcupti.so"))


def _glob_libcupti(directory: str) -> List[str]:
    return sorted(glob.glob(os.path.join(directory, "libcupti.so*")))


def _wheel_libcupti() -> List[str]:
    spec = importlib.util.find_spec("nvidia") if _module_importable("nvidia") else None
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    found = []
    for root in roots:
        for layout in ("cu13/lib", "cu12/lib", "cuda_cupti/lib"):
            found += _glob_libcupti(os.path.join(root, layout))
    return found


def _torch_libcupti() -> List[str]:
    spec = importlib.util.find_spec("torch") if _module_importable("torch") else None
    if spec is None or not spec.origin:
        return []
    return _glob_libcupti(os.path.join(os.path.dirname(spec.origin), "lib"))


TOOLKIT_HOME_VARIABLES = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")
DEFAULT_TOOLKIT_HOMES = ("/usr/local/cuda",)


def _toolkit_libcupti() -> List[str]:
    homes = [os.environ.get(var) for var in TOOLKIT_HOME_VARIABLES] + list(DEFAULT_TOOLKIT_HOMES)
    found = []
    for home in filter(None, homes):
        for sub in (
            "extras/CUPTI/lib64",
            "lib64",
            "lib",
            "targets/x86_64-linux/lib",
            "targets/sbsa-linux/lib",
        ):
            found += _glob_libcupti(os.path.join(home, sub))
    return found


def _module_importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
