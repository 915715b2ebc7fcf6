"""Shared helpers of the trace-processor tests (``tests/test_trace_*.py``), imported
directly (``from helpers import ...``); the fixtures built on them are in ``conftest.py``.

* ``reference()``: PyTorch 2.13.0's ``torch/cuda/_annotate_cuda_graph_trace.py``, loaded
  through ``tools/torch_reference.py``; tests that need it skip (with the reason) only when
  it can not be obtained at all (offline and not cached), and fail in CI (``CI`` set).
* ``expected_pipeline``: what ``cgfast annotate`` must write: the reference passes plus
  cgfast's three fixes (flows at their event's final place, every work lane named, large
  overlaps summarised rather than printed).
* ``split_events``: the exact bytes of every element of a trace's ``traceEvents``, to
  check that events no pass touches are copied byte for byte.
* ``run_cli``: the command line as a subprocess (``target/release/cgfast`` when it is
  built, else ``python -m cgfast``).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import gzip
import importlib.util
import io
import json
import os
import pickle
import re
import subprocess
import sys
import urllib.error
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
DATA = TESTS / "data"
if str(ROOT / "tools") not in sys.path:
    sys.path.insert(0, str(ROOT / "tools"))

WORK = {"kernel", "gpu_memcpy", "gpu_memset"}


def _trace_error():
    import cgfast

    # the contract names it cgfast.TraceError; fall back to the extension's class so that
    # the other checks still run where the package does not export it (a test checks that)
    return getattr(cgfast, "TraceError", None) or cgfast._cgfast.TraceError


TraceError = _trace_error()
CGFAST_BIN = ROOT / "target" / "release" / "cgfast"


# --------------------------------------------------------------------------- reference


@functools.cache
def _reference():
    """(module, None) or (None, why it could not be obtained)."""
    import torch_reference  # tools/torch_reference.py

    if os.environ.get("CGFAST_REFERENCE"):
        # an explicit path that does not work is a mistake, not "offline": no skip
        try:
            return torch_reference.load_reference(), None
        except Exception as e:
            pytest.fail(
                f"CGFAST_REFERENCE={os.environ['CGFAST_REFERENCE']} can not be loaded: {e!r}", pytrace=False
            )
    try:
        return torch_reference.load_reference(), None
    except (OSError, urllib.error.URLError, RuntimeError, TimeoutError) as e:
        return None, (
            f"the PyTorch 2.13.0 reference (torch/cuda/_annotate_cuda_graph_trace.py) can not be "
            f"obtained: not installed, not cached under ~/.cache/cgfast and not downloadable ({e!r}); "
            f"set CGFAST_REFERENCE=/path/to/it"
        )


def reference():
    """The reference module; where it cannot be had, a skip, except in CI (``CI`` set),
    where comparing with it is the point of the run."""
    module, why = _reference()
    if module is None:
        if os.environ.get("CI"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return module


# --------------------------------------------------------------------------- fixtures on disk


def h200_dir() -> Optional[Path]:
    """The real H200 traces: ``<repo>/../shared/fixtures/h200`` (CI) or beside the main
    checkout's parent (``/work/shared`` here)."""
    for candidate in (
        ROOT.parent / "shared" / "fixtures" / "h200",
        ROOT.parent.parent / "shared" / "fixtures" / "h200",
    ):
        if candidate.is_dir() and any(candidate.glob("*.json.gz")):
            return candidate
    return None


def h200_traces() -> list[Path]:
    """The real H200 traces; where they are absent, a skip, except in CI (``CI`` set),
    which runs with ``../shared`` beside the clone."""
    d = h200_dir()
    if d is None:
        if os.environ.get("CI"):
            pytest.fail(
                "CI runs with ../shared beside the clone, but the H200 fixtures are absent", pytrace=False
            )
        pytest.skip(
            f"the real H200 fixtures are absent (looked for {ROOT.parent / 'shared' / 'fixtures' / 'h200'})"
        )
    return sorted(d.glob("*.json.gz"))


@functools.cache
def gen_trace_module():
    spec = importlib.util.spec_from_file_location("cgfast_bench_gen_trace", ROOT / "bench" / "gen_trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def generate(path: Path, target_mb: float = 0.15, graphs: int = 2, nodes: int = 40, seed: int = 0) -> dict:
    """A gen_trace trace at ``path``; returns its annotations (node id -> items)."""
    result = gen_trace_module().generate(Path(path), target_mb, graphs, nodes, seed)
    annotations = result[0] if isinstance(result, tuple) else result
    return annotations


def write_json_annotations(path: Path, annotations: dict, *, wrapped: bool = True, gz: bool = False) -> Path:
    body = {str(k): v for k, v in annotations.items()}
    if wrapped:
        body = {"format": "cgfast-annotations", "version": 1, "annotations": body}
    data = json.dumps(body).encode()
    Path(path).write_bytes(gzip.compress(data) if gz else data)
    return Path(path)


def write_pickle_annotations(
    path: Path, annotations: dict, *, default_dict: bool = False, protocol: int = 4
) -> Path:
    import collections
    import pickle

    obj = annotations
    if default_dict:
        obj = collections.defaultdict(list)
        obj.update(annotations)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=protocol)
    return Path(path)


# --------------------------------------------------------------------------- reading files


def read_bytes(path: Path) -> bytes:
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data


def read_text(path: Path) -> str:
    return read_bytes(path).decode("utf-8")


def load_json(path: Path) -> Any:
    return json.loads(read_text(path))


def leftovers(directory: Path) -> list[str]:
    """Temporary files a run may have left behind."""
    return sorted(
        p.name
        for p in Path(directory).rglob("*")
        if p.name.endswith(".partial") or ".partial" in p.name or p.name.startswith(".cgfast")
    )


# --------------------------------------------------------------------------- raw event bytes

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},:]', re.S)


@dataclass
class RawTrace:
    text: str
    events: list  # the exact text of each element of traceEvents
    keys: list  # top-level keys in order


def split_events(text: str) -> RawTrace:
    """The exact text of every element of the top-level ``traceEvents`` array."""
    decoder = json.JSONDecoder()
    raw = _events_array(text)
    pos = raw["array_start"] + 1
    events = []
    ws = " \t\n\r"
    while True:
        while text[pos] in ws:
            pos += 1
        if text[pos] == "]":
            break
        _, end = decoder.raw_decode(text, pos)
        events.append(text[pos:end])
        pos = end
        while text[pos] in ws:
            pos += 1
        if text[pos] == ",":
            pos += 1
    return RawTrace(text, events, raw["keys"])


def _events_array(text: str) -> dict:
    depth = 0
    keys: list[str] = []
    expect_key = False
    last_string = None
    for m in _TOKEN.finditer(text):
        tok = m.group()
        if tok[0] == '"':
            if depth == 1 and expect_key:
                last_string = json.loads(tok)
            continue
        if tok == ":":
            if depth == 1 and expect_key:
                keys.append(last_string)
                expect_key = False
            continue
        if tok == ",":
            if depth == 1:
                expect_key = True
            continue
        if tok in "[{":
            depth += 1
            if depth == 1:
                expect_key = True
            elif depth == 2 and tok == "[" and keys and keys[-1] == "traceEvents":
                return {"array_start": m.start(), "keys": keys}
            continue
        depth -= 1
    raise AssertionError("no traceEvents array")


# --------------------------------------------------------------------------- strict values


def strict(v: Any) -> Any:
    """A comparable form that tells 1 from 1.0 and True from 1 (key order ignored)."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int):
        return ("int", v)
    if isinstance(v, float):
        return ("float", repr(v))
    if isinstance(v, str):
        return ("str", v)
    if v is None:
        return ("null",)
    if isinstance(v, (list, tuple)):
        return ("list", tuple(strict(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted(((repr(k), strict(x)) for k, x in v.items()), key=lambda kv: kv[0])))
    return ("other", repr(v))


def assert_same_dicts(actual: Any, expected: Any, what: str = "") -> None:
    """Equal as Python values, with the same types of numbers and the same key order."""
    assert actual == expected, what
    assert repr(actual) == repr(expected), f"{what}: equal values but different types or key order"


# --------------------------------------------------------------------------- reference passes


class _RecordingTrace(dict):
    """A trace dict that remembers every list assigned to ``traceEvents``: the
    reference assigns the list after noise removal, then after metadata removal."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.assigned: list[list] = []

    def __setitem__(self, key, value):
        if key == "traceEvents":
            self.assigned.append(value)
        super().__setitem__(key, value)


_WARNING = re.compile(
    r"^WARNING: large overlap ([0-9.]+)us on stream (.*?) for (.*?), skipping adjustment$", re.M | re.S
)


@dataclass
class RefRun:
    annotated: int
    moved: int
    fixed: int
    stdout: str
    noise_removed: int
    warnings: list  # (overlap, stream, name[:60]) of each WARNING line
    gpu_pid: Any


def run_reference_passes(
    ref, trace: dict, annotations, default_stream=7, overlap_stream=8, max_adjust_us=1.0
) -> RefRun:
    """The reference pipeline on ``trace`` (a :class:`_RecordingTrace`, changed in place)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        annotated = ref.annotate_trace(trace, annotations, default_stream=default_stream)
        moved = ref._move_overlapping_to_stream(
            trace, default_stream=default_stream, overlap_stream=overlap_stream
        )
        fixed = ref._fix_overlapping_timestamps(trace, max_adjust_us=max_adjust_us)
    stdout = out.getvalue()
    m = re.search(r"^Removed (\d+) noise events from empty streams$", stdout, re.M)
    gpu_pid = 0
    if getattr(trace, "assigned", None):
        for event in trace.assigned[0]:
            if (
                event.get("ph") == "M"
                and event.get("name") == "thread_name"
                and str(event.get("args", {}).get("name", "")).startswith("stream ")
            ):
                gpu_pid = event.get("pid", 0)
                break
    return RefRun(
        annotated,
        moved,
        fixed,
        stdout,
        int(m.group(1)) if m else 0,
        [m.groups() for m in _WARNING.finditer(stdout)],
        gpu_pid,
    )


@dataclass
class Expected:
    """What the file pipeline must write for one input."""

    events: list  # expected events (values)
    origin: list  # input index of each expected event (None: appended by a pass)
    flexible: dict  # position -> allowed (tid, ts) of a flow at several work events' place
    top_keys: list
    top: dict  # the other top-level keys
    input_events: list  # the parsed input events
    untouched: set  # input indices no pass changed
    ref_events: list  # the reference pipeline's own result
    ref_origin: list
    run: RefRun
    metadata_removed: int
    lanes_named: int
    flows_moved: int
    flow_home: dict  # input index of a flow -> input indices of the work events at its place


def _place(e: dict):
    return (e.get("pid"), e.get("tid"), e.get("ts"))


def expected_pipeline(
    ref, text: str, annotations, default_stream=7, overlap_stream=8, max_adjust_us=1.0
) -> Expected:
    parsed = json.loads(text)
    snapshot = copy.deepcopy(parsed["traceEvents"])
    trace = _RecordingTrace(parsed)
    events_in = trace["traceEvents"]
    index = {id(e): i for i, e in enumerate(events_in)}
    run = run_reference_passes(ref, trace, annotations, default_stream, overlap_stream, max_adjust_us)
    final = trace["traceEvents"]
    # the reference writes its result with json.dump: compare with that as parsed JSON
    ref_events = json.loads(json.dumps(final))
    ref_origin = [index.get(id(e)) for e in final]

    # Fix 1: a flow-finish event at a work event's (pid, tid, ts) ends at that event's
    # final place.
    work_at: dict = {}
    for i, e in enumerate(snapshot):
        if isinstance(e, dict) and e.get("cat") in WORK:
            work_at.setdefault(_place(e), []).append(i)
    final_of = {index[id(e)]: e for e in final if id(e) in index}
    flow_home = {}
    flexible = {}
    for pos, e in enumerate(final):
        i = index.get(id(e))
        if i is None or e.get("cat") != "ac2g" or e.get("ph") != "f":
            continue
        homes = work_at.get(_place(snapshot[i]), [])
        if not homes:
            continue
        flow_home[i] = homes
        places = []
        for h in homes:
            place = (final_of[h].get("tid"), final_of[h].get("ts"))
            if place not in places:  # Python equality: 7 == 7.0
                places.append(place)
        target = final_of[homes[-1]]
        # the flow must sit at its event's final place; a field already equal to the
        # event's (as Python compares them: 10 == 10.0) is left as it is
        if e.get("tid") != target.get("tid"):
            e["tid"] = target.get("tid")
        if e.get("ts") != target.get("ts"):
            e["ts"] = target.get("ts")
        # compared as Python compares them (7 == 7.0), and any of the events that share
        # the flow's place will do
        flexible[pos] = places
    # every flow at a work event's place survives in the reference too (it moves to a lane
    # with work): make sure the model's assumption holds
    for i, e in enumerate(snapshot):
        if isinstance(e, dict) and e.get("cat") == "ac2g" and e.get("ph") == "f" and _place(e) in work_at:
            assert i in final_of, f"model: flow {i} at a work event's place was removed by the reference"

    # Fix 2: every lane with work has a thread_name (the overlap lane included).
    work_tids = {e.get("tid") for e in final if e.get("cat") in WORK}
    named = {e.get("tid") for e in final if e.get("ph") == "M" and e.get("name") == "thread_name"}
    for tid in sorted(work_tids - named):
        final.append(
            {
                "ph": "M",
                "pid": run.gpu_pid,
                "tid": tid,
                "name": "thread_name",
                "args": {"name": f"stream {tid}"},
            }
        )

    origin = [index.get(id(e)) for e in final]
    untouched = {i for i, e in final_of.items() if strict(e) == strict(snapshot[i])}
    absent = len(snapshot) - len(final_of)
    flows_moved = 0
    for i, e in final_of.items():
        if (
            e.get("cat") == "ac2g"
            and e.get("ph") == "f"
            and (e.get("tid"), e.get("ts")) != (snapshot[i].get("tid"), snapshot[i].get("ts"))
        ):
            flows_moved += 1
    top = {k: v for k, v in parsed.items() if k != "traceEvents"}
    return Expected(
        events=json.loads(json.dumps(final)),
        origin=origin,
        flexible=flexible,
        top_keys=list(parsed.keys()),
        top=top,
        input_events=snapshot,
        untouched=untouched,
        ref_events=ref_events,
        ref_origin=ref_origin,
        run=run,
        metadata_removed=absent - run.noise_removed,
        lanes_named=len(final) - len(final_of),
        flows_moved=flows_moved,
        flow_home=flow_home,
    )


def check_output(exp: Expected, input_text: str, output_text: str, *, check_bytes: bool = True) -> None:
    """The output equals the expected pipeline result as parsed JSON, and every event
    no pass touched is the input's exact text."""
    out = json.loads(output_text)
    assert list(out.keys()) == exp.top_keys, "top-level keys differ"
    for k, v in exp.top.items():
        assert strict(out[k]) == strict(v), f"top-level {k!r} differs"
    # cgfast's scope spans come last; the rest is the reference's result
    got, spans = split_spans(out["traceEvents"])
    check_spans(got, spans)
    if len(got) != len(exp.events):
        _diff_hint(got, exp)
    assert len(got) == len(exp.events), f"{len(got)} events written, {len(exp.events)} expected"
    for pos, (g, e) in enumerate(zip(got, exp.events)):
        g = without_original_stream(
            g, exp.input_events[exp.origin[pos]] if exp.origin[pos] is not None else None
        )
        if pos in exp.flexible and isinstance(g, dict) and isinstance(e, dict):
            allowed = exp.flexible[pos]
            assert (g.get("tid"), g.get("ts")) in allowed, (
                f"event {pos} (flow): {g} not at any of its events' final places {allowed}"
            )
            g = {k: v for k, v in g.items() if k not in ("tid", "ts")}
            e = {k: v for k, v in e.items() if k not in ("tid", "ts")}
        assert strict(g) == strict(e), (
            f"event {pos} (input event {exp.origin[pos]}) differs:\n  got      {g}\n  expected {e}\n  input    {exp.input_events[exp.origin[pos]] if exp.origin[pos] is not None else None}"
        )
    if check_bytes:
        raw_in = split_events(input_text).events
        raw_out = split_events(output_text).events
        assert len(raw_out) == len(got) + len(spans)
        for pos, i in enumerate(exp.origin):
            if i is not None and i in exp.untouched:
                assert raw_out[pos] == raw_in[i], (
                    f"untouched event {i} was not copied byte for byte:\n  in  {raw_in[i]!r}\n  out {raw_out[pos]!r}"
                )


def without_original_stream(out: Any, source: Any) -> Any:
    """An output event without the ``args["original_stream"]`` that ``--lanes all`` adds
    (the reference has none), checked first: it is the input event's lane, and only an
    event that changed lanes has one."""
    if not (isinstance(out, dict) and isinstance(out.get("args"), dict) and isinstance(source, dict)):
        return out
    moved = out.get("ph") not in ("s", "f") and out.get("tid") != source.get("tid")
    src_args = source.get("args") if isinstance(source.get("args"), dict) else {}
    if "original_stream" not in out["args"] or "original_stream" in src_args:
        assert not moved or "original_stream" in src_args, f"a moved event has no original_stream: {out}"
        return out
    assert moved and strict(out["args"]["original_stream"]) == strict(source.get("tid")), (
        f"original_stream is not the input lane: {out} from {source}"
    )
    return {**out, "args": {k: v for k, v in out["args"].items() if k != "original_stream"}}


def is_scope_span(e: Any) -> bool:
    return (
        isinstance(e, dict)
        and e.get("ph") == "X"
        and isinstance(e.get("args"), dict)
        and e["args"].get("cgfast") == "scope"
    )


def split_spans(events: list) -> tuple[list, list]:
    """(the events before cgfast's scope spans, the spans), which all come last."""
    first = next((i for i, e in enumerate(events) if is_scope_span(e)), len(events))
    assert all(is_scope_span(e) for e in events[first:]), "scope spans come after every other event"
    return events[:first], events[first:]


def _ns(x: float) -> int:
    return round(x * 1000)


def check_spans(events: list, spans: list, key: str = "module") -> None:
    """What the issue asks of scope spans, checked on an output: on each (pid, lane) any
    two spans are nested or disjoint; every graphed event with ``args[key]`` lies inside a
    span of that name on its lane; every span is a dotted prefix of the value of an event
    inside it and covers exactly its events (starts at the first one, ends at the last end)."""
    num = (int, float)
    by_lane: dict = {}
    for s in spans:
        assert s["cat"] == "gpu_user_annotation" and s["args"] == {"cgfast": "scope", "key": key}, s
        assert isinstance(s["ts"], num) and isinstance(s["dur"], num) and s["dur"] >= 0, s
        by_lane.setdefault((s["pid"], s["tid"]), []).append(
            (_ns(s["ts"]), _ns(s["ts"]) + _ns(s["dur"]), s["name"])
        )
    for lane, intervals in by_lane.items():
        intervals.sort(key=lambda t: (t[0], -t[1]))
        stack: list = []
        for start, end, name in intervals:
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack:
                assert end <= stack[-1][1], (
                    f"spans cross on lane {lane}: {stack[-1]} and {(start, end, name)}"
                )
            stack.append((start, end, name))
    graphed = []
    for e in events:
        if (
            not isinstance(e, dict)
            or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")
            or not isinstance(e.get("args"), dict)
        ):
            continue
        node = e["args"].get("graph node id")
        if (
            node in (None, 0)
            or not isinstance(e.get("ts"), num)
            or not isinstance(e.get("dur", 0), num)
            or isinstance(e.get("ts"), bool)
        ):
            continue
        graphed.append(e)
    covered = {id(s): [] for s in spans}
    spans_of_lane: dict = {}
    for s in spans:
        spans_of_lane.setdefault((s["pid"], s["tid"]), []).append(s)

    # events that overlap on a lane share the spans of their common prefix only: no
    # spans can hold each of two overlapping events of different scopes and not cross
    def value_of(e):
        v = e["args"].get(key)
        return v if isinstance(v, str) and v else None

    def common(a, b):
        if a is None or b is None:
            return a or b
        parts = []
        for x, y in zip(a.split("."), b.split(".")):
            if x != y:
                break
            parts.append(x)
        return ".".join(parts)

    wanted = {}
    lanes: dict = {}
    for e in graphed:
        lanes.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    for lane_events in lanes.values():
        lane_events.sort(key=lambda e: _ns(e["ts"]))
        cluster: list = []
        cluster_end = None
        for e in [*lane_events, None]:
            start = None if e is None else _ns(e["ts"])
            if cluster and (e is None or start >= cluster_end):
                path = None
                for c in cluster:
                    path = common(path, value_of(c))
                if len({c["args"].get("correlation") for c in cluster}) > 1:
                    path = None
                for c in cluster:
                    wanted[id(c)] = value_of(c) if len(cluster) == 1 else (path or None)
                cluster, cluster_end = [], None
            if e is not None:
                cluster.append(e)
                end = start + _ns(e.get("dur", 0))
                cluster_end = end if cluster_end is None else max(cluster_end, end)
    for e in graphed:
        start, end = _ns(e["ts"]), _ns(e["ts"]) + _ns(e.get("dur", 0))
        inside = [
            s
            for s in spans_of_lane.get((e.get("pid"), e.get("tid")), [])
            if _ns(s["ts"]) <= start and end <= _ns(s["ts"]) + _ns(s["dur"])
        ]
        for s in inside:
            covered[id(s)].append(e)
        if wanted[id(e)]:
            assert any(s["name"] == wanted[id(e)] for s in inside), (
                f"event {e} lies in no span {wanted[id(e)]!r} on its lane"
            )
    for s in spans:
        events_in = covered[id(s)]
        values = [value_of(e) for e in events_in]
        assert any(v is not None and (v == s["name"] or v.startswith(s["name"] + ".")) for v in values), (
            f"span {s} covers no event of that scope"
        )
        assert _ns(s["ts"]) == min(_ns(e["ts"]) for e in events_in), (
            f"span {s} does not start at its first event"
        )
        assert _ns(s["ts"]) + _ns(s["dur"]) == max(_ns(e["ts"]) + _ns(e.get("dur", 0)) for e in events_in), (
            f"span {s} does not end at its last event"
        )


def _diff_hint(got, exp):  # pragma: no cover - only prints on failure
    import difflib

    a = [json.dumps(x, sort_keys=True) for x in got]
    b = [json.dumps(x, sort_keys=True) for x in exp.events]
    print("\n".join(list(difflib.unified_diff(b, a, "expected", "got", lineterm="", n=1))[:60]))


# --------------------------------------------------------------------------- reports


def annotations_for_reference(path: Path) -> dict:
    """What the reference would load: JSON node ids become ints."""
    data = Path(path).read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    if data.lstrip()[:1] == b"{":
        doc = json.loads(data)
        if doc.get("format") == "cgfast-annotations":
            doc = doc.get("annotations", {})
        return {int(k): v for k, v in doc.items()}
    return pickle.loads(data)


def check_report(report: dict, exp: Expected, *, trace: Path, output: Path, annotations=None) -> None:
    run = exp.run
    assert report["input"] == str(trace)
    assert report["output"] == str(output)
    if annotations is not None:
        assert report["annotations"] == str(annotations)
    assert report["events"] == len(exp.input_events)
    assert report["annotated"] == run.annotated
    assert report["noise_removed"] == run.noise_removed
    assert report["metadata_removed"] == exp.metadata_removed
    assert report["moved"] == run.moved
    assert report["fixed"] == run.fixed
    assert report["large_overlaps"] == len(run.warnings)
    overlaps = [float(w[0]) for w in run.warnings]
    assert abs(report["largest_overlap_us"] - max(overlaps, default=0.0)) <= 0.0005 + 1e-9
    assert report["lanes_named"] == exp.lanes_named
    assert report["flows_moved"] == exp.flows_moved
    assert report["input_bytes"] == Path(trace).stat().st_size
    if "overlaps" in report:
        assert len(report["overlaps"]) == len(run.warnings)
        for o, w in zip(report["overlaps"], run.warnings):
            assert f"{o['overlap_us']:.3f}" == w[0], (o, w)
            assert str(o["lane"]) == w[1], (o, w)
            assert o["name"][:60] == w[2], (o, w)


# --------------------------------------------------------------------------- the command line


def cli_command() -> list[str]:
    override = os.environ.get("CGFAST_BIN")
    if override:
        return [override]
    if CGFAST_BIN.exists():
        return [str(CGFAST_BIN)]
    return [sys.executable, "-m", "cgfast"]


def clean_env() -> dict:
    env = dict(os.environ)
    env.pop("CGFAST_TIMING", None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "python"), env.get("PYTHONPATH", "")) if p)
    return env


def run_cli(
    *args, cwd=None, command: Optional[list[str]] = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    cmd = (command or cli_command()) + [str(a) for a in args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=clean_env())


def python_cli() -> list[str]:
    return [sys.executable, "-m", "cgfast"]


def assert_clean_failure(proc: subprocess.CompletedProcess, mention: Optional[str] = None) -> str:
    """Exit status 1 or 2, exactly one line on stderr, no panic or traceback."""
    err = proc.stderr
    assert proc.returncode in (1, 2), f"exit status {proc.returncode}; stderr {err!r}; stdout {proc.stdout!r}"
    assert "panicked" not in err and "Traceback" not in err and "panic" not in err.lower(), err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {err!r}"
    if mention is not None:
        assert mention in lines[0], f"{mention!r} not named in {lines[0]!r}"
    return lines[0]
