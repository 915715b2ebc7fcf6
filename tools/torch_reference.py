"""The reference implementation cgfast is measured against: PyTorch 2.13.0's
``torch/cuda/_annotate_cuda_graph_trace.py`` (pure standard library).

It is taken from the installed torch when that has the 2.13 semantics, else read out
of the torch 2.13.0 wheel on PyPI with HTTP range requests (a few hundred kB, not the
whole wheel) and cached under ``~/.cache/cgfast``. ``CGFAST_REFERENCE=/path/to/file``
overrides both.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import sys
import urllib.request
import zipfile
from pathlib import Path
from types import ModuleType

MEMBER = "torch/cuda/_annotate_cuda_graph_trace.py"
VERSION = "2.13.0"
WHEEL_TAG = "cp311-cp311-manylinux_2_28_x86_64"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cgfast"
MARKER = 'args["annotation"] = str(ann)'


class _RangeFile(io.RawIOBase):
    """A read-only file over HTTP range requests, enough for ``zipfile``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.pos = 0
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as r:
            self.size = int(r.headers["Content-Length"])

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = base + offset
        return self.pos

    def readinto(self, buffer) -> int:  # type: ignore[override]
        n = min(len(buffer), self.size - self.pos)
        if n <= 0:
            return 0
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{self.pos + n - 1}"})
        with urllib.request.urlopen(request, timeout=60) as r:
            data = r.read()
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


def _wheel_url() -> str:
    request = urllib.request.Request(
        "https://pypi.org/simple/torch/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    with urllib.request.urlopen(request, timeout=60) as r:
        files = json.load(r)["files"]
    name = f"torch-{VERSION}-{WHEEL_TAG}.whl"
    for f in files:
        if f["filename"] == name:
            return f["url"]
    raise RuntimeError(f"{name} is not on PyPI")


def _installed() -> Path | None:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "cuda" / "_annotate_cuda_graph_trace.py"
    if path.exists() and MARKER in path.read_text():
        return path
    return None


def reference_path() -> Path:
    """The reference file, fetching it once if needed."""
    override = os.environ.get("CGFAST_REFERENCE")
    if override:
        return Path(override)
    installed = _installed()
    if installed is not None:
        return installed
    cached = CACHE / f"annotate_cuda_graph_trace-{VERSION}.py"
    if not cached.exists():
        with zipfile.ZipFile(_RangeFile(_wheel_url())) as wheel:
            source = wheel.read(MEMBER)
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(".tmp")
        tmp.write_bytes(source)
        tmp.replace(cached)
    return cached


def load_reference() -> ModuleType:
    path = reference_path()
    spec = importlib.util.spec_from_file_location("torch_reference_annotate", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    print(reference_path())
    sys.exit(0)
