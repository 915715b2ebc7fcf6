"""The path types the Python API takes."""

from __future__ import annotations

import os
from typing import Iterable, Union

PathLike = Union[str, "os.PathLike[str]"]
"""A file or directory: a ``str`` or an ``os.PathLike``."""

Paths = Union[PathLike, Iterable[PathLike]]
"""One path (a trace, a directory or a glob pattern) or an iterable of them."""
