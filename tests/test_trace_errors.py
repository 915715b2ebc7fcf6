"""Bad input and safety: every failure is one clear line on stderr (naming the file, and
the byte offset where known) with exit status 1 or 2 -- no panic, no traceback --, leaves
nothing behind and never clobbers an existing output; from Python ``annotate_file``
raises ``cgfast.TraceError``. Malicious pickles are refused without running anything.
Odd events pass through untouched."""

from __future__ import annotations

import functools
import gzip
import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cgfast
from helpers import (
    CGFAST_BIN,
    TraceError,
    assert_clean_failure,
    check_output,
    clean_env,
    cli_command,
    expected_pipeline,
    leftovers,
    python_cli,
    read_text,
    run_cli,
    split_events,
    write_json_annotations,
)

GOOD_EVENTS = [
    {"name": "thread_name", "ph": "M", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
    {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "pid": 0,
        "tid": 7,
        "ts": 10,
        "dur": 5,
        "args": {"graph node id": 5},
    },
    {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 10, "cat": "ac2g", "name": "ac2g", "bp": "e"},
    {
        "ph": "X",
        "cat": "kernel",
        "name": "k2",
        "pid": 0,
        "tid": 7,
        "ts": 12,
        "dur": 5,
        "args": {"graph node id": 6},
    },
]
GOOD_TRACE = json.dumps({"schemaVersion": 1, "traceEvents": GOOD_EVENTS, "traceName": "x"})
GOOD_ANNOTATIONS = {5: [{"name": "layers.0", "stream": 60}], 6: ["label"]}


def runners():
    """The CLI binary (when built) and ``python -m cgfast``, from where ``helpers.cli_command``
    looks for them."""
    binary = os.environ.get("CGFAST_BIN") or str(CGFAST_BIN)
    python_m = [sys.executable, "-m", "cgfast"]
    if os.path.exists(binary):
        return [pytest.param([binary], id="cli"), pytest.param(python_m, id="python-m")]
    return [pytest.param(python_m, id="python-m")]


@pytest.fixture
def good(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(GOOD_TRACE)
    ann = write_json_annotations(tmp_path / "ann.json", GOOD_ANNOTATIONS)
    return trace, ann


def fail_cli(command, *args, mention=None, cwd=None):
    proc = run_cli(*args, command=command, cwd=cwd)
    return assert_clean_failure(proc, mention=mention)


def test_trace_error_is_exported():
    assert hasattr(cgfast, "TraceError"), (
        "the contract names cgfast.TraceError; python/cgfast/__init__.py does not export it"
    )
    assert issubclass(cgfast.TraceError, Exception)
    assert cgfast.TraceError is cgfast._cgfast.TraceError


# =========================================================================== bad traces


def _truncated_gzip() -> bytes:
    data = gzip.compress(GOOD_TRACE.encode() * 1)
    return data[: len(data) // 2]


def _bad_crc_gzip() -> bytes:
    data = bytearray(gzip.compress(GOOD_TRACE.encode()))
    data[-8] ^= 0xFF  # the CRC32 of the trailer
    return bytes(data)


BAD_TRACES = {
    "empty": b"",
    "whitespace": b"  \n\t ",
    "garbage": bytes(range(256)) * 4,
    "text": b"hello, this is not JSON\n",
    "truncated": GOOD_TRACE.encode()[: len(GOOD_TRACE) // 2],
    "truncated_in_string": b'{"traceEvents": [{"name": "abc',
    "unclosed_array": b'{"traceEvents": [',
    "trailing_garbage": GOOD_TRACE.encode() + b" trailing",
    "two_documents": GOOD_TRACE.encode() + GOOD_TRACE.encode(),
    "bad_token": b'{"traceEvents": [{"ph": "X", "ts": 1,, "dur": 2}]}',
    "bad_number": b'{"traceEvents": [{"ph": "X", "ts": 01}]}',
    "single_quotes": b"{'traceEvents': []}",
    "unescaped_control": b'{"traceEvents": [{"name": "a\x01b"}]}',
    "bad_escape": b'{"traceEvents": [{"name": "a\\qb"}]}',
    "array_top": b"[1, 2, 3]",
    "number_top": b"5",
    "null_top": b"null",
    "string_top": b'"traceEvents"',
    "no_trace_events": b'{"schemaVersion": 1, "events": []}',
    "trace_events_object": b'{"traceEvents": {"a": 1}}',
    "trace_events_number": b'{"traceEvents": 5}',
    "trace_events_null": b'{"traceEvents": null}',
    "trace_events_string": b'{"traceEvents": "[]"}',
    "corrupt_gzip": b"\x1f\x8b\x08\x00" + b"\x00" * 6 + b"this is not deflate data at all" * 3,
    "truncated_gzip": _truncated_gzip(),
    "bad_crc_gzip": _bad_crc_gzip(),
    "gzip_of_garbage": gzip.compress(b"\x00\xff garbage \x00"),
    "gzip_of_empty": gzip.compress(b""),
    "just_gzip_magic": b"\x1f\x8b",
}
OFFSET_KNOWN = {
    "truncated",
    "truncated_in_string",
    "unclosed_array",
    "trailing_garbage",
    "two_documents",
    "bad_token",
    "bad_number",
    "single_quotes",
    "text",
    "garbage",
    "unescaped_control",
    "bad_escape",
}


def assert_nothing_left(directory: Path, expected: set):
    names = {p.name for p in directory.iterdir()}
    assert names == expected, f"left behind: {sorted(names - expected)}"
    assert leftovers(directory) == []


@pytest.mark.parametrize("command", runners())
@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_bad_trace_through_the_cli(tmp_path, case, command):
    trace = tmp_path / ("t.json.gz" if "gzip" in case else "t.json")
    trace.write_bytes(BAD_TRACES[case])
    ann = write_json_annotations(tmp_path / "ann.json", GOOD_ANNOTATIONS)
    line = fail_cli(command, trace, "-a", ann, mention=trace.name)
    if case in OFFSET_KNOWN:
        assert re.search(r"\bbyte \d+|offset \d+", line), f"no byte offset in {line!r}"
    assert_nothing_left(tmp_path, {trace.name, ann.name})
    # an existing output is not clobbered
    out = tmp_path / "existing.json"
    out.write_text("precious")
    fail_cli(command, trace, "-a", ann, "-o", out, mention=trace.name)
    assert out.read_text() == "precious"
    assert_nothing_left(tmp_path, {trace.name, ann.name, out.name})


@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_bad_trace_through_annotate_file(tmp_path, case):
    trace = tmp_path / "t.json"
    trace.write_bytes(BAD_TRACES[case])
    ann = write_json_annotations(tmp_path / "ann.json", GOOD_ANNOTATIONS)
    out = tmp_path / "out.json"
    out.write_text("precious")
    with pytest.raises(TraceError) as info:
        cgfast.annotate_file(trace, ann, out)
    message = str(info.value)
    assert "t.json" in message and "\n" not in message.strip()
    assert out.read_text() == "precious"
    with pytest.raises(TraceError):
        cgfast.annotate_file(trace, ann)
    assert_nothing_left(tmp_path, {trace.name, ann.name, out.name})


@pytest.mark.parametrize("command", runners())
def test_unreadable_trace_paths(tmp_path, command):
    ann = write_json_annotations(tmp_path / "ann.json", GOOD_ANNOTATIONS)
    fail_cli(command, tmp_path / "missing.json", "-a", ann, mention="missing.json")
    (tmp_path / "adir.json").mkdir()
    fail_cli(command, tmp_path / "adir.json", "-a", ann, mention="adir.json")
    assert_nothing_left(tmp_path, {"ann.json", "adir.json"})
    with pytest.raises(TraceError, match=r"missing\.json"):
        cgfast.annotate_file(tmp_path / "missing.json", ann)
    with pytest.raises(TraceError, match=r"adir\.json"):
        cgfast.annotate_file(tmp_path / "adir.json", ann)


@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0,
    reason="running as root: file permissions do not deny reading",
)
def test_permission_denied(tmp_path, good):
    trace, ann = good
    trace.chmod(0)
    try:
        fail_cli(None, trace, "-a", ann, mention=trace.name)
    finally:
        trace.chmod(0o644)


@pytest.mark.parametrize("command", runners())
def test_unwritable_output(tmp_path, good, command):
    trace, ann = good
    fail_cli(command, trace, "-a", ann, "-o", tmp_path / "no" / "such" / "dir" / "o.json", mention="o.json")
    (tmp_path / "outdir").mkdir()
    fail_cli(command, trace, "-a", ann, "-o", tmp_path / "outdir", mention="outdir")
    assert_nothing_left(tmp_path, {trace.name, ann.name, "outdir"})
    assert list((tmp_path / "outdir").iterdir()) == []


@pytest.mark.parametrize("command", runners())
def test_bad_output_fails_before_reading_the_input(tmp_path, good, command):
    # the input is a pipe no one writes to: a run that read it before trying the
    # output would wait forever
    _, ann = good
    fifo = tmp_path / "never.json"
    os.mkfifo(fifo)
    fail_cli(command, fifo, "-a", ann, "-o", tmp_path / "no" / "such" / "dir" / "o.json", mention="o.json")
    (tmp_path / "outdir").mkdir()
    fail_cli(command, fifo, "-a", ann, "-o", tmp_path / "outdir", mention="outdir")
    assert_nothing_left(tmp_path, {fifo.name, ann.name, "trace.json", "outdir"})


@pytest.mark.parametrize("umask", [0o077, 0o002])
def test_new_outputs_respect_the_umask_and_replaced_ones_keep_their_mode(tmp_path, good, umask):
    trace, ann = good
    fresh = tmp_path / "fresh.json"
    kept = tmp_path / "kept.json"
    kept.write_text("old")
    kept.chmod(0o640)
    for out in (fresh, kept):
        proc = subprocess.run(
            [
                "sh",
                "-c",
                f'umask {umask:03o} && exec "$@"',
                "sh",
                *cli_command(),
                str(trace),
                "-a",
                str(ann),
                "-o",
                str(out),
            ],
            capture_output=True,
            text=True,
            env=clean_env(),
        )
        assert proc.returncode == 0, proc.stderr
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~umask
    assert kept.stat().st_mode & 0o777 == 0o640


# =========================================================================== bad annotation files


def _pickle(obj, protocol=4) -> bytes:
    return pickle.dumps(obj, protocol=protocol)


BAD_ANNOTATIONS = {
    "empty": b"",
    "whitespace": b"   \n",
    "garbage": bytes(range(255, -1, -1)),
    "truncated_json": json.dumps({"5": [{"name": "x"}]}).encode()[:-4],
    "json_list": b"[1, 2]",
    "non_integer_key": json.dumps({"abc": [{"name": "x"}]}).encode(),
    "float_key": json.dumps({"5.5": [{"name": "x"}]}).encode(),
    "non_integer_key_wrapped": json.dumps(
        {"format": "cgfast-annotations", "version": 1, "annotations": {"node": []}}
    ).encode(),
    "non_list_items": json.dumps({"5": "not a list"}).encode(),
    "annotations_not_object": json.dumps(
        {"format": "cgfast-annotations", "version": 1, "annotations": [1]}
    ).encode(),
    "future_version": json.dumps({"format": "cgfast-annotations", "version": 99, "annotations": {}}).encode(),
    "gzip_truncated": gzip.compress(json.dumps({"5": [{"name": "x"}]}).encode())[:20],
    "pickle_truncated": _pickle({5: [{"name": "x"}]})[:-3],
    "pickle_list": _pickle([1, 2, 3]),
    "pickle_string_key": _pickle({"abc": [{"name": "x"}]}),
    "pickle_set": _pickle({5: [{"x"}]}),
    "pickle_datetime": None,  # filled below
    "pickle_non_list_items": _pickle({5: "x"}),
}


def _datetime_pickle() -> bytes:
    import datetime

    return _pickle({5: [{"when": datetime.datetime(2024, 1, 1)}]})


BAD_ANNOTATIONS["pickle_datetime"] = _datetime_pickle()


@pytest.mark.parametrize("command", runners())
@pytest.mark.parametrize("case", sorted(BAD_ANNOTATIONS))
def test_bad_annotations(tmp_path, good, case, command):
    trace, _ = good
    ann = tmp_path / ("bad.pkl" if case.startswith("pickle") else "bad.json")
    ann.write_bytes(BAD_ANNOTATIONS[case])
    out = tmp_path / "o.json"
    out.write_text("precious")
    fail_cli(command, trace, "-a", ann, "-o", out, mention=ann.name)
    fail_cli(command, trace, "-a", ann, mention=ann.name)
    assert out.read_text() == "precious"
    assert_nothing_left(tmp_path, {trace.name, "ann.json", ann.name, out.name})
    with pytest.raises(TraceError, match=re.escape(ann.name)):
        cgfast.annotate_file(trace, ann, out)
    with pytest.raises(TraceError, match=re.escape(ann.name)):
        cgfast.load_annotations(ann)
    assert out.read_text() == "precious"


@pytest.mark.parametrize("command", runners())
def test_missing_annotation_file(tmp_path, good, command):
    trace, _ = good
    fail_cli(command, trace, "-a", tmp_path / "nope.pkl", mention="nope.pkl")
    with pytest.raises(TraceError, match=r"nope\.pkl"):
        cgfast.annotate_file(trace, tmp_path / "nope.pkl")
    assert not (tmp_path / "trace.annotated.json").exists()


# =========================================================================== malicious pickles


class _Evil:
    def __init__(self, marker: Path, how: str = "os"):
        self.marker = str(marker)
        self.how = how

    def __reduce__(self):
        if self.how == "os":
            return (os.system, (f"touch {self.marker}",))
        if self.how == "eval":
            return (eval, (f"open({self.marker!r}, 'w').close()",))
        if self.how == "subprocess":
            return (subprocess.call, (["touch", self.marker],))
        raise AssertionError(self.how)


def evil_pickles(marker: Path) -> dict:
    m = str(marker)
    import collections

    return {
        "os_system_top": _pickle(_Evil(marker)),
        "os_system_value": _pickle({5: [{"name": _Evil(marker)}]}),
        "os_system_item": _pickle({5: [_Evil(marker)]}),
        "eval": _pickle({5: [_Evil(marker, "eval")]}),
        "subprocess": _pickle({5: [_Evil(marker, "subprocess")]}, protocol=2),
        "protocol0_classic": b"cos\nsystem\n(S'touch " + m.encode() + b"'\ntR.",
        "protocol0_inst": b"(S'touch " + m.encode() + b"'\nios\nsystem\n.",
        "builtins_exec": b"cbuiltins\nexec\n(S'open(" + repr(m).encode() + b', "w").close()\'\ntR.',
        "defaultdict_factory": _pickle(
            collections.defaultdict(functools.partial(os.system, f"touch {m}"), {5: ["x"]})
        ),
        "stack_global": pickle.dumps({5: [_Evil(marker)]}, protocol=5),
        "reduce_in_key": _pickle({_Evil(marker): ["x"]}),
    }


@pytest.mark.parametrize("case", sorted(evil_pickles(Path("/x"))))
def test_malicious_pickles_are_refused_unexecuted(tmp_path, good, case):
    trace, _ = good
    marker = tmp_path / "PWNED"
    payload = evil_pickles(marker)[case]
    # the payload really does run under pickle.load (so the test can fail)
    loaded = pickle.loads(payload)
    if case == "defaultdict_factory":
        loaded[99]  # the factory runs on the first missing key
    assert marker.exists()
    marker.unlink()

    ann = tmp_path / "kernel_annotations_rank0_1.pkl"
    ann.write_bytes(payload)
    fail_cli(None, trace, "-a", ann, mention=ann.name)
    assert not marker.exists(), "the pickle was executed by the CLI"
    with pytest.raises(TraceError, match=re.escape(ann.name)):
        cgfast.annotate_file(trace, ann)
    with pytest.raises(TraceError):
        cgfast.load_annotations(ann)
    assert not marker.exists(), "the pickle was executed by the bindings"
    # auto-discovery does not run it either
    step = tmp_path / "traces" / "step_1"
    step.mkdir(parents=True)
    t2 = step / "000000.1.pt.trace.json"
    t2.write_text(GOOD_TRACE)
    (tmp_path / "traces" / ann.name).write_bytes(payload)
    fail_cli(None, t2, mention=ann.name)
    assert not marker.exists()
    assert not (step / "000000.1.pt.trace.annotated.json").exists()


def test_python_cli_refuses_malicious_pickles(tmp_path, good):
    trace, _ = good
    marker = tmp_path / "PWNED"
    ann = tmp_path / "a.pkl"
    ann.write_bytes(evil_pickles(marker)["os_system_value"])
    fail_cli(python_cli(), trace, "-a", ann, mention="a.pkl")
    assert not marker.exists()


# =========================================================================== -o equal to the input


@pytest.mark.parametrize("gz", [False, True])
def test_output_equal_to_input(ref, tmp_path, gz):
    text = GOOD_TRACE
    trace = tmp_path / ("t.json.gz" if gz else "t.json")
    trace.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    ann = write_json_annotations(tmp_path / "a.json", GOOD_ANNOTATIONS)
    proc = run_cli(trace, "-a", ann, "-o", trace)
    assert proc.returncode == 0, proc.stderr
    exp = expected_pipeline(ref, text, GOOD_ANNOTATIONS)
    check_output(exp, text, read_text(trace))
    assert (trace.read_bytes()[:2] == b"\x1f\x8b") == gz
    assert_nothing_left(tmp_path, {trace.name, ann.name})


def test_output_equal_to_input_through_annotate_file(ref, tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text(GOOD_TRACE)
    ann = write_json_annotations(tmp_path / "a.json", GOOD_ANNOTATIONS)
    cgfast.annotate_file(trace, ann, trace)
    check_output(expected_pipeline(ref, GOOD_TRACE, GOOD_ANNOTATIONS), GOOD_TRACE, trace.read_text())


def test_output_equal_to_input_via_another_spelling(ref, tmp_path):
    (tmp_path / "sub").mkdir()
    trace = tmp_path / "t.json"
    trace.write_text(GOOD_TRACE)
    ann = write_json_annotations(tmp_path / "a.json", GOOD_ANNOTATIONS)
    proc = run_cli("t.json", "-a", ann, "-o", "sub/../t.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    check_output(expected_pipeline(ref, GOOD_TRACE, GOOD_ANNOTATIONS), GOOD_TRACE, trace.read_text())
    os.symlink(trace, tmp_path / "link.json")
    before = trace.read_text()
    proc = run_cli(trace, "-a", ann, "-o", tmp_path / "link.json")
    assert proc.returncode == 0, proc.stderr
    # either the link or the file now holds the result of annotating `before`; nothing was lost
    result = (tmp_path / "link.json").read_text()
    check_output(expected_pipeline(ref, before, GOOD_ANNOTATIONS), before, result)


@pytest.mark.parametrize("case", ["truncated", "trace_events_number", "truncated_gzip"])
def test_failed_run_onto_the_input_keeps_it(tmp_path, case):
    trace = tmp_path / "t.json"
    trace.write_bytes(BAD_TRACES[case])
    ann = write_json_annotations(tmp_path / "a.json", GOOD_ANNOTATIONS)
    fail_cli(None, trace, "-a", ann, "-o", trace, mention="t.json")
    assert trace.read_bytes() == BAD_TRACES[case]
    assert_nothing_left(tmp_path, {trace.name, ann.name})


def test_bad_annotations_onto_the_input_keep_it(tmp_path, good):
    trace, _ = good
    before = trace.read_bytes()
    bad = tmp_path / "bad.json"
    bad.write_text('{"x": [}')
    fail_cli(None, trace, "-a", bad, "-o", trace, mention="bad.json")
    assert trace.read_bytes() == before


def test_existing_output_is_replaced_on_success(ref, tmp_path, good):
    trace, ann = good
    out = tmp_path / "o.json"
    out.write_text("old")
    proc = run_cli(trace, "-a", ann, "-o", out)
    assert proc.returncode == 0
    check_output(expected_pipeline(ref, GOOD_TRACE, GOOD_ANNOTATIONS), GOOD_TRACE, out.read_text())


# =========================================================================== odd events


ODD = [
    "5",
    '"a string event"',
    '[1, 2, {"ph": "X"}]',
    "null",
    "true",
    "-0.5e3",
    '{"ph": "X", "cat": "kernel", "name": "string ts", "pid": 0, "tid": 143, "ts": "12.5", "dur": 3, "args": {"graph node id": 5}}',
    '{"ph": "X", "cat": "kernel", "name": "null dur", "pid": 0, "tid": 143, "ts": 13, "dur": null, "args": {"graph node id": 6}}',
    '{"ph": "X", "cat": "kernel", "name": "list args", "pid": 0, "tid": 143, "ts": 14, "dur": 1, "args": [1, 2]}',
    '{"ph": "X", "cat": "kernel", "name": "string args", "pid": 0, "tid": 143, "ts": 15, "dur": 1, "args": "graph node id"}',
    '{"ph": "X", "cat": "kernel", "name": "null args", "pid": 0, "tid": 143, "ts": 16, "dur": 1, "args": null}',
    '{"ph": "X", "cat": "kernel", "name": "null ts", "pid": 0, "tid": 143, "ts": null, "dur": 1, "args": {"graph node id": 5}}',
    '{"ph": "X", "cat": "kernel", "name": "object ts", "pid": 0, "tid": 143, "ts": {"v": 1}, "dur": [1], "args": {"graph node id": 6}}',
    '{"ph": "X", "cat": "gpu_memcpy", "name": "string dur", "pid": 0, "tid": 143, "ts": 17, "dur": "1", "args": {"graph node id": 5}}',
    '{"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 0, "tid": 143, "ts": "10", "id": 9}',
    "{}",
]


def test_odd_events_pass_through_untouched(ref, tmp_path):
    normal = [
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
        {"name": "thread_name", "ph": "M", "pid": 0, "tid": 143, "args": {"name": "stream 143 "}},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k0",
            "pid": 0,
            "tid": 7,
            "ts": 0,
            "dur": 10,
            "args": {"graph node id": 5},
        },
        {"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 0, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k1",
            "pid": 0,
            "tid": 7,
            "ts": 5,
            "dur": 1,
            "args": {"graph node id": 6},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k2",
            "pid": 0,
            "tid": 7,
            "ts": 9.5,
            "dur": 1,
            "args": {"graph node id": 7},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "eager anchor",
            "pid": 0,
            "tid": 143,
            "ts": 1,
            "dur": 1,
            "args": {"graph node id": 0},
        },
        {"ph": "X", "cat": "gpu_user_annotation", "name": "## x ##", "pid": 0, "tid": 20, "ts": 0, "dur": 20},
    ]
    anchor = 6
    normal_raw = [json.dumps(e) for e in normal]
    raw = normal_raw[: anchor + 1] + ODD + normal_raw[anchor + 1 :]
    text = '{"traceEvents": [\n' + ",\n".join(raw) + "\n]}"
    plain_text = '{"traceEvents": [\n' + ",\n".join(normal_raw) + "\n]}"
    ann = {5: [{"name": "a"}], 6: [{"name": "b"}], 7: ["c"]}
    trace = tmp_path / "t.json"
    trace.write_text(text)
    ann_path = write_json_annotations(tmp_path / "a.json", ann)
    proc = run_cli(trace, "-a", ann_path, "-o", tmp_path / "o.json", "--json")
    assert proc.returncode == 0, proc.stderr
    out_raw = split_events((tmp_path / "o.json").read_text()).events
    # the odd events, byte for byte, in order, right after their anchor
    pos = [i for i, r in enumerate(out_raw) if r in ODD]
    assert [out_raw[i] for i in pos] == ODD
    assert pos == list(range(pos[0], pos[0] + len(ODD)))
    assert json.loads(out_raw[pos[0] - 1])["name"] == "eager anchor"
    # everything else is what the pipeline makes of the trace without them
    rest = [r for r in out_raw if r not in ODD]
    rebuilt = '{"traceEvents": [' + ",".join(rest) + "]}"
    exp = expected_pipeline(ref, plain_text, ann)
    check_output(exp, plain_text, rebuilt)
    # and annotate_file agrees
    cgfast.annotate_file(trace, ann_path, tmp_path / "o2.json")
    assert (tmp_path / "o2.json").read_bytes() == (tmp_path / "o.json").read_bytes()


# Invalid UTF-8 inside a trace's strings is copied through byte for byte (cgfast is a
# drop-in that loses nothing), counted in the report (each invalid sequence is what a
# decoder shows as one U+FFFD), and the command line says so in one warning line.
INVALID_UTF8_TRACE = (
    b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k\xff\xfe", "pid": 0, "tid": 7, "ts": 1, "dur": 1, '
    b'"args": {"graph node id": 5}}, {"ph": "X", "cat": "cpu_op", "name": "op \xe2\x82", "pid": 1, "tid": 2, '
    b'"ts": 1, "dur": 1, "args": {"note": "caf\xc3\xa9"}}]}'
)
INVALID_UTF8_AT = INVALID_UTF8_TRACE.index(b"\xff")


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("command", runners())
def test_invalid_utf8_is_copied_through_counted_and_warned_of(tmp_path, good, gz, command):
    _, ann = good
    trace = tmp_path / ("u.json.gz" if gz else "u.json")
    trace.write_bytes(gzip.compress(INVALID_UTF8_TRACE) if gz else INVALID_UTF8_TRACE)
    out = tmp_path / "o.json"
    proc = run_cli(trace, "-a", ann, "-o", out, "--json", command=command)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        f"cgfast: warning: {trace}: 3 invalid UTF-8 sequences in its strings, the first at byte "
        f"{INVALID_UTF8_AT}, copied through as they are"
    ], proc.stderr
    report = json.loads(proc.stdout)
    assert (report["invalid_utf8"], report["invalid_utf8_at"]) == (3, INVALID_UTF8_AT)
    written = out.read_bytes()
    # the annotated kernel keeps its name's bytes, the untouched event all of its own
    assert b'"name": "k\xff\xfe"' in written and b'"name": "layers.0"' in written
    untouched = INVALID_UTF8_TRACE[INVALID_UTF8_TRACE.index(b'{"ph": "X", "cat": "cpu_op"') : -2]
    assert untouched in written


def test_invalid_utf8_through_annotate_file_is_in_the_report_alone(tmp_path, good, capfd):
    _, ann = good
    trace = tmp_path / "u.json"
    trace.write_bytes(INVALID_UTF8_TRACE)
    report = cgfast.annotate_file(trace, ann, tmp_path / "o.json")
    assert (report["invalid_utf8"], report["invalid_utf8_at"]) == (3, INVALID_UTF8_AT)
    assert b"k\xff\xfe" in (tmp_path / "o.json").read_bytes()
    assert capfd.readouterr().err == "", "a library says it in the report, not on stderr"
    clean = cgfast.annotate_file(good[0], ann, tmp_path / "clean.json")
    assert (clean["invalid_utf8"], clean["invalid_utf8_at"]) == (0, None)


def test_deeply_nested_event_is_a_clean_outcome(tmp_path, good):
    _, ann = good
    trace = tmp_path / "deep.json"
    depth = 100_000
    trace.write_text('{"traceEvents": [{"ph": "X", "args": ' + "[" * depth + "]" * depth + "}]}")
    proc = run_cli(trace, "-a", ann, "-o", tmp_path / "o.json")
    if proc.returncode != 0:
        assert_clean_failure(proc, mention="deep.json")
        assert not (tmp_path / "o.json").exists()
    else:
        assert (tmp_path / "o.json").read_text() == trace.read_text()


NOT_ANNOTATION_FILES = {
    "json_list": b"[1, 2]",
    "json_string": b'"x"',
    "json_number": b"5",
    "text": b"hello, these are my notes\n",
    "csv": b"node,name\n5,x\n",
}


@pytest.mark.parametrize("command", runners())
@pytest.mark.parametrize("case", sorted(NOT_ANNOTATION_FILES))
def test_files_that_are_no_annotation_file_say_so(tmp_path, good, case, command):
    trace, _ = good
    ann = tmp_path / "notes.pkl"
    ann.write_bytes(NOT_ANNOTATION_FILES[case])
    line = fail_cli(command, trace, "-a", ann, mention="notes.pkl")
    assert line.endswith(
        "notes.pkl: not an annotation file: expected a JSON object of node id -> annotations, or a pickle"
    ), line
    assert "opcode" not in line and "memo" not in line


@pytest.mark.parametrize("protocol", [0, 1, 2, 5])
@pytest.mark.parametrize("kind", [dict, "defaultdict"])
def test_pickles_of_every_protocol_are_read(tmp_path, good, protocol, kind):
    import collections

    trace, _ = good
    mapping = dict(GOOD_ANNOTATIONS) if kind is dict else collections.defaultdict(list, GOOD_ANNOTATIONS)
    ann = tmp_path / "a.pkl"
    ann.write_bytes(pickle.dumps(mapping, protocol=protocol))
    proc = run_cli(trace, "-a", ann, "-o", tmp_path / "o.json", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["annotations_loaded"] == len(GOOD_ANNOTATIONS)
