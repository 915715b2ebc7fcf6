"""Annotate many traces on a Dask cluster: the trace of every rank of every profiled
step of a training job, read from the shared storage the workers see.

Each task is one file, named by its path: no trace goes through the scheduler, a
worker reads its input and writes ``<trace>.annotated.json[.gz]`` beside it. The
work of a task is ``cgfast.annotate_file`` (Rust, which releases the GIL, so the
threads of one worker annotate in parallel).

Needs ``distributed`` (``pip install 'cgfast[dask]'``) on the client and the workers,
and cgfast installed on the workers. Importing this module imports neither.
"""

from __future__ import annotations

import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, Iterable, List, Optional, Union

from cgfast import _cgfast
from cgfast._annotate import annotate_file
from cgfast._typing import PathLike
from cgfast.reports import BatchResult


class BatchError(Exception):
    """Some traces failed; ``reports`` has every file's report, failures included."""

    def __init__(self, reports: List[BatchResult]) -> None:
        self.reports = reports
        failed = [r for r in reports if not r["ok"]]
        lines = "\n".join(f"  {r['error']}" for r in failed)
        super().__init__(f"{len(failed)} of {len(reports)} traces failed:\n{lines}")


def annotate_one(trace: str, options: Dict[str, Any]) -> BatchResult:
    """Annotate one trace, reporting a failure instead of raising it: what a task runs."""
    try:
        report = annotate_file(trace, **options)
    except Exception as e:  # a failure of one file must not take down the batch
        message = str(e)
        return {"input": trace, "ok": False, "error": message if trace in message else f"{trace}: {message}"}
    return {"input": trace, "ok": True, "report": report}


def annotate_many(
    paths: Union[PathLike, Iterable[PathLike]],
    engine: Any = None,
    *,
    raise_on_failure: bool = False,
    **options: Any,
) -> List[BatchResult]:
    """Annotate every trace ``paths`` name (files, directories searched for
    ``*.trace.json[.gz]``, glob patterns), each beside its input with the annotations
    found for its rank, or those named by ``annotations=``.

    ``engine``: a ``distributed.Client``; ``None`` uses the current client when there
    is one, else threads of this process. ``options`` are those of
    ``cgfast.annotate_file`` (``annotations``, ``default_stream``, ``overlap_stream``,
    ``max_adjust_us``, ``recover``, ``gzip_level``); ``output`` is not one, since every
    trace gets its own.

    Returns one dict per trace, in the order found: ``{"input", "ok": True, "report"}``
    or ``{"input", "ok": False, "error"}``. Failures are reported, not raised, unless
    ``raise_on_failure``: then a :class:`BatchError` carrying all the reports is raised
    once every trace has been tried.
    """
    if "output" in options:
        raise TypeError("annotate_many writes each output beside its trace; output= names one file")
    if options.get("annotations") is not None:
        options["annotations"] = os.fspath(options["annotations"])
    traces = _cgfast.find_traces(paths)
    client = engine if engine is not None else _current_client()
    if client is None:
        with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
            reports = list(pool.map(lambda t: annotate_one(t, options), traces))
    else:
        reports = _on_cluster(client, traces, options)
    if raise_on_failure and not all(r["ok"] for r in reports):
        raise BatchError(reports)
    return reports


def _on_cluster(client: Any, traces: List[str], options: Dict[str, Any]) -> List[BatchResult]:
    from distributed import wait

    # Workers may run elsewhere: name every file from the root of the shared storage.
    absolute = [os.path.abspath(t) for t in traces]
    batch = uuid.uuid4().hex[:8]  # a later batch of the same files gets tasks of its own
    keys = [f"cgfast-annotate-{batch}-{i} {path}" for i, path in enumerate(absolute)]
    futures = client.map(annotate_one, absolute, options=options, key=keys)
    wait(futures)
    reports: List[BatchResult] = []
    for trace, future in zip(traces, futures):
        if future.status == "finished":
            done: BatchResult = future.result()
            done["input"] = trace  # as the caller named it, not the absolute path
            reports.append(done)
        else:  # the task itself failed: its worker died, or cgfast is missing there
            reports.append(
                {
                    "input": trace,
                    "ok": False,
                    "error": f"{trace}: {future.status} on the cluster: {_why(future)}",
                }
            )
    return reports


def _why(future: Any) -> str:
    try:
        return repr(future.exception())
    except BaseException as e:  # a cancelled task has no exception to give
        return repr(e)


def _current_client() -> Optional[Any]:
    try:
        from distributed import get_client
    except ImportError:
        return None
    try:
        return get_client()
    except ValueError:
        return None
