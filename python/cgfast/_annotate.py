"""The trace functions as the package offers them: the native ones (``cgfast._cgfast``,
Rust) with the core's defaults, which ``_cgfast.DEFAULTS`` holds, as their signatures'
defaults. Nothing here decides anything: each call goes straight to the core."""

from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Optional, Union

from cgfast import _cgfast
from cgfast._cgfast import CancelToken
from cgfast._typing import PathLike
from cgfast.reports import AnnotateReport, Lanes, Recover

DEFAULTS = _cgfast.DEFAULTS

# node id -> what the node is annotated with: dicts of args to write, or strings
# (written to args["annotation"])
Annotations = Mapping[int, Iterable[Union[Mapping[str, Any], str]]]


def annotate_file(
    trace: PathLike,
    annotations: Union[PathLike, Annotations, None] = None,
    output: Optional[PathLike] = None,
    *,
    default_stream: int = DEFAULTS["default_stream"],
    overlap_stream: int = DEFAULTS["overlap_stream"],
    max_adjust_us: float = DEFAULTS["max_adjust_us"],
    recover: Recover = DEFAULTS["recover"],
    gzip_level: int = DEFAULTS["gzip_level"],
    topology_only: bool = DEFAULTS["topology_only"],
    spans: Optional[str] = DEFAULTS["spans"],
    lanes: Lanes = DEFAULTS["lanes"],
    cancel: Optional[CancelToken] = None,
) -> AnnotateReport:
    """Annotate the trace file ``trace`` (``.json`` or ``.json.gz``) into ``output``
    (default: ``<trace>.annotated.json[.gz]``), as ``cgfast annotate`` does: annotate,
    move overlapping kernels to ``overlap_stream``, fix timestamp jitter up to
    ``max_adjust_us``, recover missing graph node ids (``recover``: "auto", "always" or
    "never"; ``topology_only`` ignores ``cgfast.replay`` stamps and equivalent replays,
    as before they existed); ``spans``: the dotted annotation key whose scopes get
    ``gpu_user_annotation`` spans on the GPU lanes, None or "none" for none;
    ``lanes``: "all" moves graphed events to their annotated lanes and keeps the lane
    each ran on as ``args["original_stream"]``, "none" moves none and writes a named
    lane as ``args["annotated_stream"]``, "reference" moves as "all" without
    ``original_stream``.

    ``annotations``: a path to an annotation file (JSON, optionally gzipped, or a
    PyTorch pickle), a dict of node id -> list, or None to find
    ``kernel_annotations_rank<R>_*.json`` as the CLI does. The output is written to a
    temporary file and renamed into place, so a failed run leaves nothing behind; gzip
    when its name ends in ``.gz`` (``gzip_level`` 0..9). Invalid UTF-8 in the trace's
    strings is copied through as it is and counted in the report (``invalid_utf8``).

    Returns the ``--json`` report as a dict. Raises ``TraceError`` for a trace or
    annotation file that cannot be processed, ValueError for bad options. On the main
    thread Ctrl-C stops the run (its temporary removed) and raises KeyboardInterrupt;
    ``cancel``, a :class:`CancelToken`, stops it from any thread (then
    ``cgfast.CancelledError``): a run on another thread stops only so. Each run is
    stopped by its own token alone.
    """
    return _cgfast.annotate_file(
        trace,
        annotations,
        output,
        default_stream=default_stream,
        overlap_stream=overlap_stream,
        max_adjust_us=max_adjust_us,
        recover=recover,
        gzip_level=gzip_level,
        topology_only=topology_only,
        spans=spans,
        lanes=lanes,
        cancel=cancel,
    )


def annotate_trace(
    trace: Dict[str, Any], annotations: Annotations, default_stream: int = DEFAULTS["default_stream"]
) -> int:
    """Annotate a trace held as a dict (``json.load`` of a profiler trace), in place,
    as the reference's ``annotate_trace`` does: every graphed event (``args["graph node
    id"]`` in ``annotations``) gets its annotation's keys in ``args`` (``str()`` of each
    value; a string item goes to ``args["annotation"]``) and moves to the lane its
    ``"stream"`` names (else ``default_stream``); ``gpu_user_annotation`` and flow
    events left on lanes without work are removed (printing how many), and every work
    lane gets a ``thread_name``.

    ``annotations``: node id -> list of dicts or strings (what ``load_annotations``
    returns). Returns the number of events annotated. Raises what the reference's
    Python would (KeyError without ``traceEvents``, AttributeError for events or
    ``args`` that are not dicts), changing nothing then.
    """
    return _cgfast.annotate_trace(trace, annotations, default_stream)


def move_overlapping_to_stream(
    trace: Dict[str, Any],
    default_stream: int = DEFAULTS["default_stream"],
    overlap_stream: int = DEFAULTS["overlap_stream"],
) -> int:
    """Move graphed kernels of ``default_stream`` that start before the previous one
    ended to ``overlap_stream`` (their ``tid`` and ``args["stream"]``), in place, as the
    reference's ``_move_overlapping_to_stream`` does. Returns the number moved.

    Where the reference would fail (a graphed kernel without ``ts``, a ``ts`` or
    ``dur`` that is not a number, an unhashable ``tid``) it raises the same exception
    type (KeyError, TypeError, AttributeError; OverflowError beyond 64-bit integers)
    and changes nothing.
    """
    return _cgfast.move_overlapping_to_stream(trace, default_stream, overlap_stream)


def fix_overlapping_timestamps(
    trace: Dict[str, Any], max_adjust_us: float = DEFAULTS["max_adjust_us"]
) -> int:
    """On each lane, move a graphed work event that starts at most ``max_adjust_us``
    before the previous one ends to start at that end, in place, as the reference's
    ``_fix_overlapping_timestamps`` does; larger overlaps are left alone and printed as
    warnings. Returns the number of events moved.

    Where the reference would fail (a graphed event without ``ts``, a ``ts`` or ``dur``
    that is not a number) it raises the same exception type (KeyError, TypeError;
    OverflowError beyond 64-bit integers) and changes nothing.
    """
    return _cgfast.fix_overlapping_timestamps(trace, max_adjust_us)
