"""`cgfast summary` and `cgfast.summarize`: busy time, shares, replays, formats, charts."""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import struct
import subprocess
import sys
import zlib
from collections import defaultdict
from pathlib import Path

import pytest

from trace_files import cgfast, gen_trace, kernel, read_json, write_trace

cg = pytest.importorskip("cgfast")

# Lanes 7 and 8 of one GPU, µs. Replay 1: a [0,10), b [5,15) on the other lane, an
# unannotated memcpy [20,24). Replay 2: a [100,110) and a [100,104) on two lanes.
# Busy: [0,15) + [20,24) + [100,110) = 29. Attributed: a = 5 + 2.5 + 10 = 17.5
# ([100,104) is split between a's own two kernels), b = 2.5 + 5 = 7.5, unannotated 4.
EVENTS = [
    kernel(0, 10, name="gemm", replay=1, node=1, module="a"),
    kernel(5, 10, tid=8, name="softmax", replay=1, node=2, module="b"),
    kernel(20, 4, name="Memcpy DtoD (Device -> Device)", cat="gpu_memcpy", replay=1, node=3),
    kernel(100, 10, name="gemm", replay=2, node=1, module="a"),
    kernel(100, 4, tid=8, name="norm", replay=2, node=4, module="a"),
    kernel(200, 3, name="eager", replay=9, node=0, module="a"),
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "op",
        "pid": 1,
        "tid": 1,
        "ts": 0,
        "dur": 500,
        "args": {"module": "a"},
    },
]
BUSY = 29.0
ATTRIBUTED = {"a": 17.5, "b": 7.5, None: 4.0}


@pytest.fixture
def trace(tmp_path):
    return write_trace(tmp_path / "t.annotated.json", EVENTS)


def report_of(*args):
    run = cgfast("summary", *args, "--format", "json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_busy_time_and_shares_match_the_hand_computed_ones(trace):
    report = report_of(trace, "--by", "module")
    totals = report["totals"]
    assert totals["busy_us"] == BUSY
    assert totals["kernels"] == 5 and totals["replays"] == 2
    assert totals["total_us"] == 10 + 10 + 4 + 10 + 4
    assert (totals["ungraphed_kernels"], totals["ungraphed_us"]) == (1, 3.0)
    assert (totals["unannotated_kernels"], totals["unannotated_us"]) == (1, 4.0)
    assert totals["coverage"] == pytest.approx(25 / 29)
    rows = {r["value"]: r for r in report["rows"]}
    assert [r["value"] for r in report["rows"]] == ["a", "b", None]
    for value, attributed in ATTRIBUTED.items():
        assert rows[value]["attributed_us"] == pytest.approx(attributed)
        assert rows[value]["share"] == pytest.approx(attributed / BUSY)
    assert sum(r["share"] for r in report["rows"]) == pytest.approx(1.0)
    a = rows["a"]
    assert (a["kernels"], a["total_us"], a["mean_us"], a["busy_us"]) == (3, 24.0, 8.0, 20.0)
    assert a["top_kernels"] == [
        {"name": "gemm", "kernels": 2, "total_us": 20.0},
        {"name": "norm", "kernels": 1, "total_us": 4.0},
    ]


def test_steps_report_each_replay_and_the_spread(trace):
    report = report_of(trace, "--by", "module", "--steps")
    replays = report["replays"]
    assert [(r["replay"], r["kernels"], r["busy_us"], r["span_us"]) for r in replays] == [
        (1, 3, 19.0, 24.0),
        (2, 2, 10.0, 10.0),
    ]
    assert [(v["value"], v["attributed_us"]) for v in replays[0]["values"]] == [
        ("a", 7.5),
        ("b", 7.5),
        (None, 4.0),
    ]
    a = next(r for r in report["rows"] if r["value"] == "a")
    assert (a["replays"], a["replay_min_us"], a["replay_median_us"], a["replay_max_us"]) == (
        2,
        7.5,
        8.75,
        10.0,
    )
    assert a["replay_stdev_us"] == pytest.approx(1.25)
    spread = report["replay_spread"]["busy_us"]
    assert (spread["count"], spread["min"], spread["max"], spread["median"]) == (2, 10.0, 19.0, 14.5)


def test_traces_add_up(trace, tmp_path):
    other = write_trace(tmp_path / "u.annotated.json.gz", EVENTS)
    report = report_of(trace, other, "--by", "module")
    assert report["totals"]["busy_us"] == 2 * BUSY
    assert report["totals"]["traces"] == 2
    rows = {r["value"]: r for r in report["rows"]}
    assert rows["a"]["kernels"] == 6
    assert rows["a"]["share"] == pytest.approx(17.5 / 29)
    # A directory yields the outputs of cgfast annotate in it, not other traces.
    write_trace(tmp_path / "raw.pt.trace.json", EVENTS)
    assert report_of(tmp_path, "--by", "module")["totals"]["traces"] == 2


def test_csv_rows(trace):
    run = cgfast("summary", trace, "--by", "module", "--format", "csv")
    assert run.returncode == 0, run.stderr
    rows = list(csv.DictReader(io.StringIO(run.stdout)))
    assert [r["value"] for r in rows] == ["a", "b", ""]
    assert list(rows[0]) == [
        "value",
        "kernels",
        "total_us",
        "mean_us",
        "busy_us",
        "attributed_us",
        "share",
        "top_kernels",
    ]
    assert float(rows[1]["attributed_us"]) == 7.5
    assert json.loads(rows[0]["top_kernels"])[0]["name"] == "gemm"
    run = cgfast("summary", trace, "--by", "module", "--format", "csv", "--steps")
    rows = list(csv.DictReader(io.StringIO(run.stdout)))
    assert [(r["replay"], r["value"]) for r in rows] == [("1", "a"), ("1", "b"), ("1", ""), ("2", "a")]
    assert float(rows[3]["share"]) == 1.0 and float(rows[3]["replay_busy_us"]) == 10.0


def test_table(trace):
    run = cgfast("summary", trace, "--by", "module", "--steps")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "cgfast summary by args.module: 1 trace, 5 graphed kernels in 2 replays"
    assert "0.029 ms of GPU time" in lines[1]
    assert "86.2% of busy time" in lines[2]
    header = next(line for line in lines if line.lstrip().startswith("module"))
    assert header.split()[:3] == ["module", "kernels", "total"]
    body = lines[lines.index(header) + 1 :]
    assert body[0].split()[:2] == ["a", "3"] and "60.3%" in body[0] and "gemm (83%)" in body[0]
    assert body[2].split()[0] == "(unannotated)"
    assert any(line.split()[:3] == ["1", "0.000", "3"] for line in body), "the replay table"


def test_any_key_and_unannotated_traces(trace):
    rows = report_of(trace, "--by", "stream")["rows"]
    assert {r["value"]: r["kernels"] for r in rows} == {"7": 3, "8": 2}
    rows = report_of(trace, "--by", "layer")["rows"]
    assert [(r["value"], r["kernels"], r["share"]) for r in rows] == [(None, 5, 1.0)]


def union(intervals):
    total, end = 0.0, -math.inf
    for s, e in sorted(intervals):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def attributed(intervals):
    """Each elementary segment between boundaries, split among the intervals covering it."""
    points = sorted({p for iv in intervals for p in iv})
    share = [0.0] * len(intervals)
    for lo, hi in zip(points, points[1:]):
        on = [k for k, (s, e) in enumerate(intervals) if s <= lo and hi <= e]
        for k in on:
            share[k] += (hi - lo) / len(on)
    return share


@pytest.mark.parametrize("node_ids", [True, False], ids=["node ids", "ids recovered from the topology"])
def test_a_synthetic_replay_trace_against_a_plain_python_reckoning(tmp_path, node_ids):
    raw = tmp_path / "gen.pt.trace.json"
    annotations, topology = gen_trace.generate(raw, 0.6, graphs=2, nodes=40, node_ids=node_ids)
    annotations_file, _ = gen_trace.write_annotations(tmp_path, annotations, topology)
    out = tmp_path / "gen.pt.trace.annotated.json"
    run = cgfast("annotate", raw, "-a", annotations_file, "-o", out)
    assert run.returncode == 0, run.stderr
    report = report_of(out, "--by", "name", "--top", "1")

    graphed = [
        e
        for e in read_json(out)["traceEvents"]
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"].get("graph node id", 0) != 0
    ]
    ns = lambda us: round(us * 1000)  # noqa: E731  (the trace's 3 decimals, exactly)
    intervals = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in graphed]
    assert report["totals"]["kernels"] == len(graphed)
    assert report["totals"]["busy_us"] == pytest.approx(union(intervals) / 1000, abs=1e-6)
    # The attribution, by brute force over the replays (which do not overlap).
    by_value = defaultdict(float)
    by_replay = defaultdict(list)
    for e, iv in zip(graphed, intervals):
        by_replay[e["args"]["correlation"]].append((e["args"].get("name"), iv))
    for kernels in by_replay.values():
        for (value, _), share in zip(kernels, attributed([iv for _, iv in kernels])):
            by_value[value] += share / 1000
    rows = {r["value"]: r for r in report["rows"]}
    assert set(rows) == set(by_value)
    for value, us in by_value.items():
        assert rows[value]["attributed_us"] == pytest.approx(us, rel=1e-9, abs=1e-6)
    assert sum(r["share"] for r in report["rows"]) == pytest.approx(1.0)
    assert 0.5 < report["totals"]["coverage"] < 1.0


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.annotated.json"], "missing.annotated.json: no such file"),
        (
            ["bad.annotated.json"],
            "cgfast: error: bad.annotated.json: not a valid trace: expected ',' or ']' between events at byte 19",
        ),
        (["cut.annotated.json"], "cgfast: error: cut.annotated.json: the trace is truncated"),
        (["missing.annotated.json", "cut.annotated.json"], "none of the 2 traces could be read"),
        (["empty_dir"], "no annotated traces (*.annotated.json or *.annotated.json.gz) under"),
        (["t.annotated.json", "--chart", "c.png"], "the chart must be a .svg or .html file"),
        (["t.annotated.json", "--by", ""], "--by needs a key"),
        (["t.annotated.json", "--format", "xml"], "invalid value 'xml'"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, args, message):
    write_trace(tmp_path / "t.annotated.json", EVENTS)
    (tmp_path / "bad.annotated.json").write_text('{"traceEvents": [1 2]}')
    (tmp_path / "cut.annotated.json").write_text('{"traceEvents": [1, 2,')
    (tmp_path / "empty_dir").mkdir()
    run = cgfast("summary", *args, cwd=tmp_path)
    assert run.returncode != 0
    assert message in run.stderr
    assert "Traceback" not in run.stderr and "panic" not in run.stderr


def test_a_failed_trace_among_good_ones(trace, tmp_path):
    bad = tmp_path / "bad.annotated.json"
    bad.write_text("[]")
    run = cgfast("summary", trace, bad, "--format", "json")
    assert run.returncode == 1
    assert json.loads(run.stdout)["totals"]["traces"] == 1
    assert "cgfast: failed: " in run.stderr and "1 of 2 traces could not be read" in run.stderr


def test_python_rows_and_frames(trace, monkeypatch):
    rows = cg.summarize(trace, by="module")
    assert [r["value"] for r in rows] == ["a", "b", None]
    assert rows[0]["share"] == pytest.approx(17.5 / 29)
    steps = cg.summarize([trace], by="module", steps=True)
    assert [(r["replay"], r["value"]) for r in steps] == [(1, "a"), (1, "b"), (1, None), (2, "a")]
    report = cg.summary_report(trace, by="module", steps=True)
    assert report["totals"]["busy_us"] == BUSY and report["replay_rows"] == steps
    with pytest.raises(cg.TraceError, match="no such file"):
        cg.summarize(trace.parent / "missing.annotated.json")
    with pytest.raises(ValueError, match="by must be a key"):
        cg.summarize(trace, by="")
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="pip install pandas"):
        cg.summarize_frame(trace, by="module")


def test_data_frames_with_pandas(trace):
    pandas = pytest.importorskip("pandas")
    frame = cg.summarize_frame(trace, by="module", steps=True)
    assert isinstance(frame, pandas.DataFrame)
    assert frame.groupby("replay")["share"].sum().round(9).tolist() == [1.0, 1.0]


def test_importing_cgfast_imports_no_pandas_torch_or_dask():
    code = "import sys, cgfast, cgfast.summary, cgfast.batch; print(sorted(m for m in ('pandas', 'torch', 'distributed', 'dask') if m in sys.modules))"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "[]"
    )


# The chart: bars in a real browser.

BAR = (0x4E, 0x79, 0xA7)
GREY = (0xBA, 0xB0, 0xAC)


def browser():
    return next(
        (
            b
            for b in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
            if shutil.which(b)
        ),
        None,
    )


def read_png(path: Path):
    """(width, height, rows of RGB tuples) of an 8-bit, non-interlaced RGB(A) PNG."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append([tuple(line[x * channels : x * channels + 3]) for x in range(width)])
        previous = line
    return width, height, rows


def bars_in(rows, color):
    """Lengths of the horizontal bars of `color`, top to bottom."""
    bars, in_bar = [], False
    for row in rows:
        length = sum(1 for px in row if max(abs(a - b) for a, b in zip(px, color)) <= 6)
        if length > 0 and not in_bar:
            bars.append(length)
        elif length > 0:
            bars[-1] = max(bars[-1], length)
        in_bar = length > 0
    return bars


def screenshot(page: Path, tmp_path: Path) -> Path:
    """A 1200x800 PNG of `page` from a headless browser with a profile of its own.

    A browser that dies before writing the PNG (seen once on a fresh CI machine) is run
    a second time; a second failure fails the test with both runs' exit codes.
    """
    png = tmp_path / f"{page.name}.png"
    failures = []
    for attempt in range(2):
        command = [
            browser(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            f"--user-data-dir={tmp_path / f'profile{attempt}'}",
            "--hide-scrollbars",
            "--window-size=1200,800",
            f"--screenshot={png}",
            page.as_uri(),
        ]
        shot = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if png.exists():
            return png
        failures.append(f"exit {shot.returncode}: {shot.stderr[-2000:]}")
    pytest.fail("the browser wrote no screenshot:\n" + "\n".join(failures))


@pytest.mark.skipif(
    browser() is None, reason="no headless browser (apt-get install chromium) to render the chart in"
)
@pytest.mark.parametrize("kind", ["svg", "html"])
def test_the_chart_renders_in_a_browser(tmp_path, kind):
    times = {"attention": 50, "mlp": 40, "norm": 30, "embed <&>": 20, "head": 10}
    events = [
        kernel(1000 * k, us, replay=1, node=k + 1, module=value)
        for k, (value, us) in enumerate(times.items())
    ]
    events.append(kernel(9000, 25, replay=1, node=99))
    trace = write_trace(tmp_path / "c.annotated.json", events)
    chart = tmp_path / f"chart.{kind}"
    # The bars alone (with --by module the icicle is drawn above them unless told not to).
    run = cgfast("summary", trace, "--by", "module", "--no-hierarchy", "--chart", chart)
    assert run.returncode == 0, run.stderr
    text = chart.read_text()
    assert "<script" not in text and "href=" not in text and "url(" not in text
    png = screenshot(chart, tmp_path)
    width, height, rows = read_png(png)
    assert (width, height) == (1200, 800)
    blue, grey = bars_in(rows, BAR), bars_in(rows, GREY)
    assert len(blue) == 5 and len(grey) == 1, (blue, grey)
    # Longest first, lengths in proportion to the times (the longest is 500 px).
    assert blue[0] == pytest.approx(500, abs=2)
    for length, us in zip(blue, sorted(times.values(), reverse=True)):
        assert length == pytest.approx(500 * us / 50, abs=2)
    assert grey[0] == pytest.approx(250, abs=2)
