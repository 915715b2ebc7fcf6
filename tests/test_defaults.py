"""The defaults users see are what they were. They are defined once, by the core
(`Options::default()`, `SummaryOptions::default()`): the command line shows them, the
bindings export them as `_cgfast.DEFAULTS` and the package's signatures take theirs
from there, so no layer can drift from another. These tests pin the values themselves,
where users see them, and check that an option left out is that value."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

cg = pytest.importorskip("cgfast")
from cgfast import _cgfast, profiler  # noqa: E402

ANNOTATE = {
    "default_stream": 7,
    "overlap_stream": 8,
    "max_adjust_us": 1.0,
    "recover": "auto",
    "gzip_level": 3,
    "topology_only": False,
    "spans": "module",
    "lanes": "all",
}
SUMMARY = {"steps": False, "top": 3, "group_layers": False}
# `by` left out: the first of module, name and the kernel's own name that the traces carry
DIFF = {
    "group_layers": False,
    "threshold": 2.0,
    "min_change": 0.1,
    "min_share": 1.0,
    "per_rank": False,
    "pool_runs": False,
}
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "h200-compiled-transformer"


def test_the_core_exports_the_defaults_users_know():
    assert _cgfast.DEFAULTS == {**ANNOTATE, **SUMMARY, **DIFF}
    for name, value in {**ANNOTATE, **SUMMARY, **DIFF}.items():
        assert type(_cgfast.DEFAULTS[name]) is type(value), name


@pytest.mark.parametrize(
    ("function", "names"),
    [
        (cg.annotate_file, ANNOTATE),
        (cg.annotate_trace, ["default_stream"]),
        (cg.move_overlapping_to_stream, ["default_stream", "overlap_stream"]),
        (cg.fix_overlapping_timestamps, ["max_adjust_us"]),
        (cg.summary_report, SUMMARY),
        (cg.summarize, SUMMARY),
        (cg.diff, DIFF),
        (profiler.trace_handler, ["spans", "lanes"]),
        (profiler.TraceHandler, ["spans", "lanes"]),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_signatures_show_the_defaults(function, names):
    parameters = inspect.signature(function).parameters
    for name in names:
        expected = {**ANNOTATE, **SUMMARY, **DIFF}[name]
        shown = parameters[name].default
        assert shown == expected and type(shown) is type(expected), (function.__name__, name, shown)
    if "by" in parameters:
        assert parameters["by"].default is None, "by: the traces' first default key"


def test_the_command_line_shows_the_defaults():
    def shown(command: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "cgfast", command, "--help"], capture_output=True, text=True, check=True
        ).stdout

    for command, defaults in [("annotate", ANNOTATE), ("summary", SUMMARY), ("diff", DIFF)]:
        text = shown(command)
        for flag, default in defaults.items():
            if isinstance(default, bool):
                continue  # a switch, off unless given
            value = f"{default:g}" if isinstance(default, float) else str(default)
            # the flag's own entry: from the line it starts to the next flag's
            entry = re.search(rf"^ +--{flag.replace('_', '-')} .*?(?=^ +-|\Z)", text, re.M | re.S)
            assert entry and f"[default: {value}]" in entry.group(0), (command, flag, text)


@pytest.mark.skipif(not EXAMPLE.is_dir(), reason="no examples/ checkout")
def test_an_option_left_out_is_its_default(tmp_path):
    trace = EXAMPLE / "000000.h200.pt.trace.json.gz"
    annotations = next(EXAMPLE.glob("kernel_annotations_*.json"))
    left_out = tmp_path / "left_out.json"
    given = tmp_path / "given.json"
    cg.annotate_file(trace, annotations, left_out)
    cg.annotate_file(trace, annotations, given, **ANNOTATE)
    command = [sys.executable, "-m", "cgfast", "annotate", str(trace), "-a", str(annotations), "-o"]
    cli, cli_given = tmp_path / "cli.json", tmp_path / "cli_given.json"
    flags = [
        f"--{name.replace('_', '-')}={value}"
        for name, value in ANNOTATE.items()
        if not isinstance(value, bool)
    ]
    subprocess.run([*command, str(cli)], check=True, capture_output=True)
    subprocess.run([*command, str(cli_given), *flags], check=True, capture_output=True)
    expected = given.read_bytes()
    assert b'"cgfast":"scope"' in expected, "spans are on by default"
    for path in (left_out, cli, cli_given):
        assert path.read_bytes() == expected, path.name
