"""`cgfast diff --chart`: the diverging bars with their intervals (.svg) and, in the .html
page, the icicle coloured by change, rendered in a real (headless) browser."""

from __future__ import annotations

import json
import re

import pytest

from test_diff import model_events, write
from test_summary import browser, read_png, screenshot
from trace_files import cgfast

pytestmark = pytest.mark.skipif(
    browser() is None, reason="no headless browser (apt-get install chromium) to render the chart in"
)

SLOWER = (0xD6, 0x27, 0x28)
FASTER = (0x1F, 0x77, 0xB4)
NEW = (0xF2, 0x8E, 0x2B)
GONE = (0x76, 0xB7, 0xB2)
# The bars' axis of no change, and half the plot's width (the largest change reaches it).
AXIS, HALF = 795, 275

BASE = [
    ("model.a", "gemm", 100.0),
    ("model.b", "softmax", 50.0),
    ("model.c", "norm", 30.0),
    ("model.e", "copy", 8.0),
]
TEST = [
    ("model.a", "gemm", 120.0),
    ("model.b", "softmax", 40.0),
    ("model.c", "norm", 30.0),
    ("model.d", "gelu", 15.0),
]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("chart")
    base = write(d / "base.annotated.json", model_events(30, seed=1, kernels=BASE, noise=0.002))
    test = write(d / "test.annotated.json", model_events(30, seed=2, kernels=TEST, noise=0.002))
    return base, test


def spans(rows, color, tolerance=6):
    """(first row, last row, leftmost x, rightmost x) of the pixels of `color` in the
    plot (below the legend, right of the labels)."""
    found = [
        (y, x)
        for y, row in enumerate(rows)
        if y >= 105
        for x, px in enumerate(row)
        if x >= 500 and max(abs(a - b) for a, b in zip(px, color)) <= tolerance
    ]
    assert found, f"no pixel of {color}"
    ys, xs = [y for y, _ in found], [x for _, x in found]
    return min(ys), max(ys), min(xs), max(xs)


def test_the_bars_diverge_from_the_axis_with_their_intervals(traces, tmp_path):
    base, test = traces
    chart = tmp_path / "diff.svg"
    run = cgfast("diff", base, test, "--chart", chart)
    assert run.returncode == 0, run.stderr
    text = chart.read_text()
    assert "<script" not in text and "href=" not in text and "url(" not in text
    assert "hierarchy" not in text, "the .svg is the bars alone"
    # one bar per value, the interval as a whisker on each that has one
    assert len(re.findall(r"<rect [^>]*height=\"14\"", text)) == 5
    assert text.count('stroke-width="1.5"') == 3 * 3
    report = json.loads(cgfast("diff", base, test, "--format", "json").stdout)
    extent = max(max(abs(r["delta_us"]), *map(abs, r["ci_us"] or [0])) for r in report["rows"])
    length = {r["value"]: HALF * abs(r["delta_us"]) / extent for r in report["rows"]}
    _w, _h, rows = read_png(screenshot(chart, tmp_path))
    # (the axis and the whiskers' caps are drawn over a pixel or two of the bars)
    # +20 µs slower: from the axis to the right, reaching about the end of the plot
    top, _bottom, left, right = spans(rows, SLOWER)
    assert left == pytest.approx(AXIS, abs=2) and right - left == pytest.approx(length["model.a"], abs=4)
    # -10 µs faster: to the left, half as long
    f_top, _, f_left, f_right = spans(rows, FASTER)
    assert f_right == pytest.approx(AXIS, abs=2) and f_right - f_left == pytest.approx(
        length["model.b"], abs=4
    )
    assert length["model.b"] == pytest.approx(length["model.a"] / 2, rel=0.01)
    # new (+15 µs) and gone (-8 µs): their whole time, no interval
    _, _, n_left, n_right = spans(rows, NEW)
    _, _, g_left, g_right = spans(rows, GONE)
    assert n_left == pytest.approx(AXIS, abs=2) and n_right - n_left == pytest.approx(
        length["model.d"], abs=3
    )
    assert g_right == pytest.approx(AXIS, abs=2) and g_right - g_left == pytest.approx(
        length["model.e"], abs=3
    )
    # largest change first
    assert top < f_top


def test_the_page_colours_the_hierarchy_by_change(traces, tmp_path):
    base, test = traces
    chart = tmp_path / "diff.html"
    run = cgfast("diff", base, test, "--chart", chart)
    assert run.returncode == 0, run.stderr
    text = chart.read_text()
    assert "<script" not in text and "href=" not in text and "url(" not in text
    assert "The args.module hierarchy, coloured by change" in text
    assert "<td>model.a</td><td>slower</td>" in text
    _w, _h, rows = read_png(screenshot(chart, tmp_path))
    # the icicle's root row: one dark cell across the width
    trunk = (0x4A, 0x55, 0x68)
    top = next(y for y, row in enumerate(rows) if sum(px == trunk for px in row) > 1000)
    cells, current = [], None
    for px in rows[top + 2 * 30 + 25]:  # under the labels
        if min(px) >= 250:
            current = None
            continue
        if current is None or max(abs(a - b) for a, b in zip(px, current[0])) > 40:
            current = [px, 0]
            cells.append(current)
        current[1] += 1
    colours = [c for c, width in cells if width > 3]
    # a (slower), b (faster), c (the same), d (new), e (gone): widest first
    assert len(colours) == 5, cells
    a, b, c, d, e = colours
    assert a[0] > a[1] + 80 and a[0] > a[2] + 80, a
    assert b[2] > b[0] + 80, b
    assert max(c) - min(c) < 8 and min(c) > 200, c
    assert d == NEW and e == GONE
    widths = [w for _, w in cells if w > 3]
    total = 110 + 45 + 30 + 7.5 + 4
    for width, us in zip(widths, (110, 45, 30)):
        assert width == pytest.approx(1068 * us / total - 1, abs=2)
    # the parent of them all is slower (+17 of 188 µs)
    parent = rows[top + 30 + 25][600]
    assert parent[0] > parent[2] + 40, parent
