"""`cgfast summary --efficiency` and `cgfast.summarize(efficiency=True)`: FLOPs and bytes
per value against the roofline of the GPU the trace records, from synthetic traces whose
kernels carry capture-time counts (args.flops, args.bytes as Python str() writes them)."""

from __future__ import annotations

import csv
import io
import json
import math

import pytest

from trace_files import cgfast, kernel

cg = pytest.importorskip("cgfast")

H100 = "NVIDIA H100 80GB HBM3"


def events(replays: int = 2, counts: bool = True) -> list:
    """Per replay: `a` a GEMM of 49.47 GFLOP in 100 µs (half the H100's bf16 peak),
    `b` a copy of 167.5 MB in 100 µs (half its bandwidth), `c` 50 µs without counts."""
    out = []
    for r in range(replays):
        t = 1000 * r
        a = {"flops": str(49_470_000_000), "bytes": str(1000)} if counts else {}
        b = {"bytes": str(167_500_000)} if counts else {}
        out += [
            kernel(t, 100, name="gemm", replay=r + 1, node=1, module="m.a", **a),
            kernel(t + 100, 100, name="copy", replay=r + 1, node=2, module="m.b", **b),
            kernel(t + 200, 50, name="other", replay=r + 1, node=3, module="m.c"),
        ]
    return out


def write(path, evs, gpu=H100):
    doc = {"schemaVersion": 1, "traceEvents": evs}
    if gpu is not None:
        doc["deviceProperties"] = [{"id": 0, "name": gpu}]
    path.write_text(json.dumps(doc))
    return path


def by_value(rows):
    return {r["value"]: r for r in rows}


def test_json_has_the_roofline_per_value_most_time_above_it_first(tmp_path):
    trace = write(tmp_path / "t.annotated.json", events())
    out = cgfast("summary", trace, "--efficiency", "--format", "json")
    assert out.returncode == 0, out.stderr
    e = json.loads(out.stdout)["efficiency"]
    assert e["gpu"] == "H100 SXM" and e["devices"] == [H100]
    assert e["peak_tflops"]["bf16"] == 989.4 and e["peak_gbps"] == 3350.0
    assert math.isclose(e["coverage"], 400 / 500)
    assert [r["value"] for r in e["rows"]] == ["m.a", "m.b", "m.c"]
    a, b, c = e["rows"]
    assert math.isclose(a["flops_per_replay"], 49.47e9) and math.isclose(a["tflops"], 494.7)
    assert math.isclose(a["peak_fraction"], 0.5) and math.isclose(a["above_roofline_us"], 100.0)
    assert math.isclose(b["gbps"], 1675.0) and math.isclose(b["peak_fraction"], 0.5)
    assert c["counted_kernels"] == 0 and c["tflops"] is None and c["peak_fraction"] is None
    assert c["attributed_us"] == 100.0
    assert any("without args.dtype" in n for n in e["notes"])


def test_without_the_flag_the_report_is_as_before(tmp_path):
    trace = write(tmp_path / "t.annotated.json", events())
    plain = json.loads(cgfast("summary", trace, "--format", "json").stdout)
    assert "efficiency" not in plain
    assert cgfast("summary", trace, "--peak-tflops", "100").returncode != 0


def test_table_and_csv(tmp_path):
    trace = write(tmp_path / "t.annotated.json", events())
    table = cgfast("summary", trace, "--efficiency").stdout
    assert "efficiency on H100 SXM" in table and "above roofline ms" in table
    out = cgfast("summary", trace, "--efficiency", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [r["value"] for r in rows] == ["m.a", "m.b", "m.c"]
    assert rows[0]["peak_fraction"] == "0.5" and rows[2]["tflops"] == ""
    assert "kernels with counts take 80.0%" in out.stderr


def test_an_unknown_gpu_shows_absolute_figures_and_a_note(tmp_path):
    trace = write(tmp_path / "t.annotated.json", events(), gpu="NVIDIA GeForce RTX 4090")
    e = json.loads(cgfast("summary", trace, "--efficiency", "--format", "json").stdout)["efficiency"]
    assert e["gpu"] is None and e["peak_gbps"] is None
    assert any("no peaks for the GPU the traces record (NVIDIA GeForce RTX 4090)" in n for n in e["notes"])
    a = by_value(e["rows"])["m.a"]
    assert math.isclose(a["tflops"], 494.7) and a["peak_fraction"] is None and a["bound_us"] is None
    given = cgfast(
        "summary", trace, "--efficiency", "--peak-tflops", "1000", "--peak-gbps", "2000", "--format", "json"
    )
    a = by_value(json.loads(given.stdout)["efficiency"]["rows"])["m.a"]
    assert math.isclose(a["peak_fraction"], 0.4947)


def test_traces_without_counts_say_so_and_mixed_traces_work(tmp_path):
    bare = write(tmp_path / "bare.annotated.json", events(counts=False))
    e = cg.summary_report([bare], efficiency=True)["efficiency"]
    assert e["notes"][0].startswith("no graphed kernel carries FLOP or byte counts")
    assert all(r["peak_fraction"] is None and r["attributed_us"] > 0 for r in e["rows"])
    counted = write(tmp_path / "counted.annotated.json", events())
    rows = by_value(cg.summarize([bare, counted], efficiency=True))
    # m.a: counts on half its time; the figures are over that half.
    assert math.isclose(rows["m.a"]["coverage"], 0.5)
    assert math.isclose(rows["m.a"]["tflops"], 494.7) and math.isclose(rows["m.a"]["peak_fraction"], 0.5)
    assert math.isclose(rows["m.a"]["flops_per_replay"], 49.47e9)


def test_python_peaks(tmp_path):
    trace = write(tmp_path / "t.annotated.json", events(), gpu=None)
    rows = by_value(cg.summarize(trace, efficiency=True, peak_tflops=989.4, peak_gbps=3350))
    assert math.isclose(rows["m.b"]["peak_fraction"], 0.5)
    with pytest.raises(ValueError):
        cg.summarize(trace, peak_tflops=1.0)


def test_the_html_chart_draws_the_roofline(tmp_path):
    """Rendered in headless Chromium: the compute roof a long dark line, the point of
    `m.a` (half the peak, compute-bound) below it and right of the ridge."""
    from test_summary import browser, read_png, screenshot

    if browser() is None:
        pytest.skip("no headless browser (apt-get install chromium) to render the chart in")
    trace = write(tmp_path / "t.annotated.json", events())
    page = tmp_path / "chart.html"
    out = cgfast("summary", trace, "--efficiency", "--chart", page)
    assert out.returncode == 0, out.stderr
    text = page.read_text()
    assert "Roofline on H100 SXM" in text and "989.4 TFLOP/s (bf16)" in text and "3350 GB/s" in text
    _, _, rows = read_png(screenshot(page, tmp_path))
    plot = rows[80:530]

    def near(px, color, tolerance=40):
        return max(abs(a - b) for a, b in zip(px, color)) <= tolerance

    red = [
        (y, x) for y, row in enumerate(plot) for x, px in enumerate(row[:800]) if near(px, (0xE1, 0x57, 0x59))
    ]
    assert red, "no point drawn"
    point_y = (min(y for y, _ in red) + max(y for y, _ in red)) / 2
    point_x = (min(x for _, x in red) + max(x for _, x in red)) / 2
    dark_rows = {y: sum(near(px, (0x22, 0x22, 0x22), 30) for px in row[:800]) for y, row in enumerate(plot)}
    roof_y = max(dark_rows, key=dark_rows.get)
    assert dark_rows[roof_y] > 400, "no compute roof"
    roof_xs = [x for x, px in enumerate(plot[roof_y][:800]) if near(px, (0x22, 0x22, 0x22), 30)]
    ridge_x = min(roof_xs)
    # Half the peak on a log axis of two decades (100 to 10,000) over 430 px: 65 px below.
    assert 55 < point_y - roof_y < 75, (point_y, roof_y)
    assert point_x > ridge_x + 200


def slower_gemm_events(replays: int = 2) -> list:
    """:func:`events` with `a`'s GEMM taking 125 µs instead of 100 (and `c` moved)."""
    out = []
    for r in range(replays):
        t = 1000 * r
        out += [
            kernel(
                t,
                125,
                name="gemm",
                replay=r + 1,
                node=1,
                module="m.a",
                flops=str(49_470_000_000),
                bytes="1000",
            ),
            kernel(t + 125, 100, name="copy", replay=r + 1, node=2, module="m.b", bytes=str(167_500_000)),
            kernel(t + 225, 50, name="other", replay=r + 1, node=3, module="m.c"),
        ]
    return out


def test_diff_efficiency_gives_each_values_change_in_achieved_throughput(tmp_path):
    base = write(tmp_path / "base.annotated.json", events())
    test = write(tmp_path / "test.annotated.json", slower_gemm_events())
    out = cgfast("diff", base, test, "--efficiency", "--format", "json")
    assert out.returncode == 0, out.stderr
    rows = by_value(json.loads(out.stdout)["throughput"])
    assert set(rows) == {"m.a", "m.b"}  # m.c carries no counts
    a, b = rows["m.a"], rows["m.b"]
    assert math.isclose(a["base_tflops"], 494.7) and math.isclose(a["test_tflops"], 494.7 / 1.25)
    assert math.isclose(a["tflops_change"], 1 / 1.25 - 1)
    assert math.isclose(a["base_peak_fraction"], 0.5) and math.isclose(a["test_peak_fraction"], 0.4)
    assert math.isclose(b["gbps_change"], 0.0, abs_tol=1e-12) and b["tflops_change"] is None
    table = cgfast("diff", base, test, "--efficiency")
    assert table.returncode == 0, table.stderr
    assert "throughput of the kernels with FLOP or byte counts" in table.stdout
    line = next(t for t in table.stdout.splitlines() if t.strip().startswith("m.a") and "-20.0%" in t)
    assert "494.7" in line and "395.8" in line
    lines = list(
        csv.DictReader(io.StringIO(cgfast("diff", base, test, "--efficiency", "--format", "csv").stdout))
    )
    assert {row["value"] for row in lines} == {"m.a", "m.b"}


def test_diff_without_efficiency_is_unchanged_and_without_counts_says_so(tmp_path):
    base = write(tmp_path / "base.annotated.json", events())
    test = write(tmp_path / "test.annotated.json", slower_gemm_events())
    plain = cgfast("diff", base, test, "--format", "json")
    assert "throughput" not in json.loads(plain.stdout)
    assert "throughput" not in cgfast("diff", base, test).stdout
    uncounted = write(tmp_path / "plain.annotated.json", events(counts=False))
    out = cgfast("diff", base, uncounted, "--efficiency")
    assert out.returncode == 0, out.stderr
    assert "no value's kernels carry FLOP or byte counts on both sides" in out.stdout
