"""Annotation files: the JSON format the trace processor reads (plain or ``.gz``).

Reading and writing are done by the Rust core, so the CLI and Python agree on the
format; pickles written by PyTorch are read without executing any code.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Sequence

from cgfast import _cgfast

Annotations = Mapping[int, list]


def save_annotations(
    path: str | os.PathLike[str],
    annotations: Annotations,
    *,
    graphs: Optional[Mapping[int, list]] = None,
    stacks: Optional[Mapping[int, list]] = None,
    traces: Optional[Sequence[str | os.PathLike[str]]] = None,
    launch_phases: Optional[Mapping[int, str]] = None,
) -> None:
    """Write ``annotations`` (node id -> list of dicts/strings) and, optionally, the
    recorded graph topology, launch stacks (node id -> ``"file:line:function"`` frames,
    innermost first), the traces this process exported (absolute paths, which ``cgfast
    annotate DIR`` pairs with this file) and the launch phases (node id -> ``"backward"``
    where its stack is that of the forward op whose gradient it computes) to ``path``
    atomically; gzip when the name ends in ``.gz``."""
    _cgfast.write_annotations(
        os.fspath(path),
        annotations,
        graphs,
        {k: list(v) for k, v in stacks.items()} if stacks else None,
        [os.fspath(t) for t in traces] if traces else None,
        dict(launch_phases) if launch_phases else None,
    )


def load_annotations(path: str | os.PathLike[str]) -> dict[int, list]:
    """Read node id -> annotations from a cgfast JSON file or a PyTorch pickle."""
    return _cgfast.read_annotations(os.fspath(path))[0]


def load_stacks(path: str | os.PathLike[str]) -> dict[int, list[str]]:
    """Read the launch stacks (node id -> frames, innermost first) of an annotation file."""
    return _cgfast.read_annotations(os.fspath(path))[2]


def load_graphs(path: str | os.PathLike[str]) -> dict[int, list[dict[str, Any]]]:
    """Read the recorded graph topology (exec graph id -> nodes) of an annotation file."""
    return _cgfast.read_annotations(os.fspath(path))[1]
