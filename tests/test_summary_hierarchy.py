"""`cgfast summary --depth N --group-layers --hierarchy --no-hierarchy`: module paths rolled
up, and their icicle in a real browser (drawn by default with `--by module`)."""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from pathlib import Path

import pytest

from test_summary import browser, read_png, screenshot, union
from trace_files import cgfast, kernel, read_json, write_trace

cg = pytest.importorskip("cgfast")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
WORK = ("kernel", "gpu_memcpy", "gpu_memset")


def roll_up(value, depth=None, group_layers=False):
    """The rule, written independently: the first `depth` dotted segments, whole numbers as `*`."""
    if value is None:
        return None
    segments = value.split(".")[:depth] if depth else value.split(".")
    if group_layers:
        segments = ["*" if s.isascii() and s.isdigit() else s for s in segments]
    return ".".join(segments)


def report_of(*args):
    run = cgfast("summary", *args, "--format", "json")
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.fixture(scope="module", params=["h200-compiled-training", "h200-compiled-transformer"])
def example(request, tmp_path_factory):
    """An H200 compiled example (training step, or transformer inference), annotated by the CLI."""
    example = EXAMPLES / request.param
    out = tmp_path_factory.mktemp(request.param) / f"{request.param}.annotated.json"
    run = cgfast(
        "annotate",
        example / "000000.h200.pt.trace.json.gz",
        "-a",
        next(example.glob("kernel_annotations_*.json")),
        "-o",
        out,
    )
    assert run.returncode == 0, run.stderr
    return out


def by_hand(trace: Path, depth, group_layers):
    """Per rolled-up module: kernels, and own busy time (the union of its kernels per GPU), in µs."""
    ns = lambda us: round(us * 1000)  # noqa: E731  (the trace's 3 decimals, exactly)
    spans = defaultdict(lambda: defaultdict(list))
    for e in read_json(trace)["traceEvents"]:
        if e.get("cat") in WORK and e.get("args", {}).get("graph node id", 0) != 0:
            value = roll_up(e["args"].get("module"), depth, group_layers)
            spans[value][e["pid"]].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
    return {
        v: (sum(len(s) for s in per_gpu.values()), sum(union(s) for s in per_gpu.values()) / 1000)
        for v, per_gpu in spans.items()
    }


@pytest.mark.parametrize("depth, group_layers", [(None, True), (1, False), (2, False), (2, True), (3, True)])
def test_a_real_trace_rolled_up_against_a_plain_python_reckoning(example, depth, group_layers):
    training = example
    flags = (["--depth", str(depth)] if depth else []) + (["--group-layers"] if group_layers else [])
    whole = report_of(training, "--by", "module")
    rolled = report_of(training, "--by", "module", *flags)
    assert (rolled["depth"], rolled["group_layers"]) == (depth, group_layers)
    assert rolled["totals"] == whole["totals"]
    rows = {r["value"]: r for r in rolled["rows"]}
    expected = by_hand(training, depth, group_layers)
    assert set(rows) == set(expected)
    # Attributed time is split per kernel, so a merged value has the sum of its parts;
    # its own busy time is the union of its kernels, not a sum.
    attributed = defaultdict(float)
    for r in whole["rows"]:
        attributed[roll_up(r["value"], depth, group_layers)] += r["attributed_us"]
    for value, (kernels, busy) in expected.items():
        assert rows[value]["kernels"] == kernels, value
        assert rows[value]["busy_us"] == pytest.approx(busy, abs=1e-6), value
        assert rows[value]["attributed_us"] == pytest.approx(attributed[value], rel=1e-9, abs=1e-6), value
    assert sum(r["share"] for r in rolled["rows"]) == pytest.approx(1.0)
    if group_layers:
        assert not any("layers.0" in (v or "") or "layers.1" in (v or "") for v in rows)
    if depth:
        assert all(v is None or len(v.split(".")) <= depth for v in rows)


def llama_like(path: Path, layers: int, seed: int = 0) -> Path:
    """A trace shaped like a Llama forward: per layer, norms, attention projections and the MLP."""
    rng = random.Random(seed)
    modules = ["model.embed_tokens"]
    for layer in range(layers):
        p = f"model.layers.{layer}"
        modules += [
            f"{p}.input_layernorm",
            *(f"{p}.self_attn.{x}_proj" for x in "qkvo"),
            f"{p}.self_attn",
            p,
            f"{p}.post_attention_layernorm",
        ]
        modules += [f"{p}.mlp.{x}" for x in ("gate_proj", "up_proj", "act_fn", "down_proj")]
    modules += ["model.norm", "model", "lm_head", None]
    events, ts, node = [], 0.0, 1
    for replay in (1, 2):
        for module in modules:
            dur = round(rng.uniform(2, 30), 3)
            events.append(
                kernel(
                    ts,
                    dur,
                    replay=replay,
                    node=node,
                    name=f"k{node % 7}",
                    **({"module": module} if module else {}),
                )
            )
            ts, node = round(ts + dur + 0.5, 3), node + 1
    return write_trace(path, events)


def test_deep_module_paths_merge_layers(tmp_path):
    trace = llama_like(tmp_path / "llama.annotated.json", layers=32)
    rows = {
        r["value"]: r for r in report_of(trace, "--by", "module", "--group-layers", "--depth", "4")["rows"]
    }
    assert set(rows) == {
        "model.embed_tokens", "model.norm", "model", "lm_head", None, "model.layers.*",
        *(f"model.layers.*.{m}" for m in ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")),
    }  # fmt: skip
    assert rows["model.layers.*.mlp"]["kernels"] == 32 * 4 * 2
    assert rows["model.layers.*.self_attn"]["kernels"] == 32 * 5 * 2
    table = cgfast("summary", trace, "--by", "module", "--group-layers", "--depth", "4")
    assert table.returncode == 0, table.stderr
    assert (
        table.stdout.splitlines()[1]
        == "  values         rolled up to their first 4 dotted segments; numbered layers merged as *"
    )


def test_without_the_new_flags_nothing_is_added(tmp_path):
    trace = llama_like(tmp_path / "llama.annotated.json", layers=2)
    report = report_of(trace, "--by", "module")
    assert "depth" not in report and "group_layers" not in report
    assert {r["value"] for r in report["rows"]} >= {"model.layers.0.mlp.up_proj", "model.layers.1"}
    table = cgfast("summary", trace, "--by", "module", "--no-hierarchy", "--chart", tmp_path / "c.html")
    assert not any(line.lstrip().startswith("values") for line in table.stdout.splitlines())
    assert "hierarchy" not in (tmp_path / "c.html").read_text()


ICICLE = re.compile(
    r'<svg [^>]*>\n<rect width="100%" height="100%" fill="#ffffff"/>\n<text [^>]*>The args\.(\w+) hierarchy</text>.*?</svg>\n',
    re.S,
)


def charts(tmp_path, trace, kind, *args):
    """The chart `cgfast summary trace *args --chart c.kind` writes, as text."""
    chart = tmp_path / f"c{len(list(tmp_path.iterdir()))}.{kind}"
    run = cgfast("summary", trace, *args, "--chart", chart)
    assert run.returncode == 0, run.stderr
    return chart.read_text()


@pytest.mark.parametrize("kind", ["html", "svg"])
def test_by_module_the_chart_draws_the_icicle_unless_told_not_to(tmp_path, kind):
    trace = llama_like(tmp_path / "llama.annotated.json", layers=2)
    default = charts(tmp_path, trace, kind, "--by", "module")
    bars = charts(tmp_path, trace, kind, "--by", "module", "--no-hierarchy")
    assert charts(tmp_path, trace, kind, "--by", "module", "--hierarchy") == default
    assert [m.group(1) for m in ICICLE.finditer(default)] == ["module"] and not ICICLE.search(bars)
    assert "model.layers.1.mlp.down_proj" in ICICLE.search(default).group(0)
    # The default is the bars-only chart with the icicle added above the bars, nothing else changed.
    without = ICICLE.sub("", default, count=1)
    if kind == "svg":
        outer = re.match(
            r'<svg xmlns="http://www.w3.org/2000/svg" width="\d+" height="\d+" viewBox="[^"]*">\n', without
        )
        assert outer and without.endswith("</svg>\n</svg>\n")
        without = re.sub(r'^<svg y="\d+" ', "<svg ", without[outer.end() : -len("</svg>\n")])
    assert without == bars
    # --no-hierarchy also with rolled-up values: their bars, no icicle.
    rolled = charts(tmp_path, trace, kind, "--by", "module", "--depth", "2", "--no-hierarchy")
    assert not ICICLE.search(rolled) and "model.layers" in rolled and "model.layers.0" not in rolled
    # Other keys draw it only when asked.
    assert not ICICLE.search(charts(tmp_path, trace, kind, "--by", "name"))
    assert [
        m.group(1) for m in ICICLE.finditer(charts(tmp_path, trace, kind, "--by", "name", "--hierarchy"))
    ] == ["name"]


def test_from_python(tmp_path):
    trace = llama_like(tmp_path / "llama.annotated.json", layers=3)
    rows = cg.summarize(trace, by="module", depth=3, group_layers=True)
    assert rows == report_of(trace, "--by", "module", "--depth", "3", "--group-layers")["rows"]
    assert {r["value"] for r in rows} == {
        "model.embed_tokens",
        "model.norm",
        "model",
        "lm_head",
        None,
        "model.layers.*",
    }
    chart = tmp_path / "tree.html"
    report = cg.summary_report(trace, by="module", chart=chart, hierarchy=True)
    assert "depth" not in report
    assert "The args.module hierarchy" in chart.read_text()
    cg.summary_report(trace, by="module", chart=chart)
    assert ICICLE.search(chart.read_text())
    cg.summarize(trace, by="module", chart=chart, hierarchy=False)
    assert chart.read_text() == charts(tmp_path, trace, "html", "--by", "module", "--no-hierarchy")
    cg.summarize(trace, by="name", chart=chart)
    assert not ICICLE.search(chart.read_text())
    with pytest.raises(ValueError, match="depth must be at least 1"):
        cg.summarize(trace, by="module", depth=0)
    with pytest.raises(ValueError, match="give chart="):
        cg.summary_report(trace, by="module", hierarchy=True)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--depth", "0"], "invalid value '0' for '--depth <N>'"),
        (["--depth", "two"], "invalid value 'two' for '--depth <N>'"),
        (["--hierarchy"], "--hierarchy draws the hierarchy in a chart: give --chart out.html"),
        (
            ["--hierarchy", "--no-hierarchy", "--chart", "c.html"],
            "the argument '--hierarchy' cannot be used with '--no-hierarchy'",
        ),
    ],
)
def test_bad_flags_are_one_clear_line(tmp_path, args, message):
    trace = llama_like(tmp_path / "t.annotated.json", layers=1)
    run = cgfast("summary", trace, "--by", "module", *args)
    assert run.returncode != 0
    assert message in run.stderr
    assert "Traceback" not in run.stderr and "panic" not in run.stderr


# The icicle in a real browser: each level's cells as wide as their time.

TRUNK = (0x4A, 0x55, 0x68)
TIMES = {
    "enc.layers.0.attn": 40,
    "enc.layers.1.attn": 40,
    "enc.layers.0.mlp": 20,
    "enc.layers.1.mlp": 20,
    "enc.embed": 30,
    "head": 40,
    None: 10,
}
# Per level below the root, the cells' times left to right: largest first, numbered
# layers in order; the unannotated last.
LEVELS = {
    False: [[150, 40, 10], [120, 30], [60, 60], [40, 20, 40, 20]],
    True: [[150, 40, 10], [120, 30], [120], [80, 40]],
}


def cells(row):
    """Lengths of the runs of non-white pixels of a row of the picture."""
    runs, length = [], 0
    for px in row:
        if min(px) < 250:
            length += 1
        elif length:
            runs.append(length)
            length = 0
    return runs + ([length] if length else [])


@pytest.mark.skipif(
    browser() is None, reason="no headless browser (apt-get install chromium) to render the chart in"
)
@pytest.mark.parametrize("kind", ["html", "svg"])
@pytest.mark.parametrize("group_layers", [False, True], ids=["layers", "layers merged"])
def test_the_icicle_renders_in_a_browser(tmp_path, kind, group_layers):
    events = [
        kernel(1000 * k, us, replay=1, node=k + 1, **({"module": m} if m else {}))
        for k, (m, us) in enumerate(TIMES.items())
    ]
    trace = write_trace(tmp_path / "c.annotated.json", events)
    chart = tmp_path / f"chart.{kind}"
    run = cgfast(
        "summary", trace, "--by", "module", "--chart", chart, *(["--group-layers"] if group_layers else [])
    )
    assert run.returncode == 0, run.stderr
    text = chart.read_text()
    assert "<script" not in text and "href=" not in text and "url(" not in text
    assert "enc.layers.*.attn" in text if group_layers else "enc.layers.1.attn" in text
    _width, _height, rows = read_png(screenshot(chart, tmp_path))
    # The root row: the one dark cell across the whole width.
    top = next(y for y, row in enumerate(rows) if sum(px == TRUNK for px in row) > 1000)
    assert cells(rows[top + 2]) == [pytest.approx(1067, abs=1)]
    px_per_us = 1068 / sum(TIMES.values())
    for level, times in enumerate(LEVELS[group_layers], start=1):
        got = cells(rows[top + 30 * level + 2])
        # A white pixel between neighbours; whole pixels, so each within 1.
        assert got == [pytest.approx(t * px_per_us - 1, abs=1.01) for t in times], (level, got)


def test_real_traces_without_graphed_kernels(h200, tmp_path):
    """The H200 fixtures annotated by the CLI (they hold no graph node ids): an empty tree."""
    annotations = tmp_path / "ann.json"
    annotations.write_text(
        json.dumps({"format": "cgfast-annotations", "version": 1, "annotations": {"5": ["label"]}})
    )
    for fixture in h200:
        out = tmp_path / fixture.name.replace(".json.gz", ".annotated.json.gz")
        assert cgfast("annotate", fixture, "-a", annotations, "-o", out).returncode == 0
        chart = tmp_path / f"{fixture.name}.html"
        run = cgfast("summary", out, "--by", "module", "--depth", "2", "--group-layers", "--chart", chart)
        assert run.returncode == 0, run.stderr
        assert "no graphed kernels" in run.stderr and "no graphed kernels" in chart.read_text()
