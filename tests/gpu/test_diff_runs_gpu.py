"""``cgfast diff`` with three runs a side on a real GPU: the Hugging Face Llama of
``test_diff_gpu.py`` (its profiling script, run as a process of its own per run),
profiled in nine processes, in turn: the model, the same model again, and the model with
layer 1's MLP three times wider, three times over (so that a drift of the GPU over the
minutes spreads over all three).

(a) three runs of the model against three more: every interval holds the spread between
    runs (``runs.between_runs``, each value in 3 runs a side), no value and no path is
    ``slower`` or ``faster``, and ``--fail-if-slower 5`` passes;
(b) the three runs of the model against the three with the wider MLP: the values under
    ``model.layers.1.mlp`` and the paths holding it are ``slower``, nothing else changes,
    and the gate names the MLP.

Nine profiles of about 15 s each (the 3 s warm-up, imports, capture, export and
annotation): about 2.5 minutes on an H100, estimated, not yet measured. The figures are
printed (``DIFF {...}`` lines) and, with ``CGFAST_E2E_OUT`` set, written there with the
traces (``diff_runs_gpu.json``; a folder per profile).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from test_diff_gpu import REPLAYS_PER_STEP, STEPS, WIDE_LAYER, diff, figures_of, out_dir, profiled

RUNS = 3
MODULE = f"model.layers.{WIDE_LAYER}.mlp"
ANCESTORS = {"model", "model.layers", f"model.layers.{WIDE_LAYER}"}
FIGURES: dict = {}


def record(name: str, figures: dict) -> None:
    FIGURES[name] = figures
    print("DIFF " + json.dumps({"case": name, **figures}))
    keep = os.environ.get("CGFAST_E2E_OUT")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        (Path(keep) / "diff_runs_gpu.json").write_text(json.dumps(FIGURES, indent=1))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{"base": [3 folders], "again": [...], "wide": [...]}, one profile each, taken in turn."""
    pytest.importorskip("transformers")
    tmp = tmp_path_factory.mktemp("runs")
    folders: dict = {"base": [], "again": [], "wide": []}
    for k in range(RUNS):
        for name, args in [("base", []), ("again", []), ("wide", ["--wide-layer", str(WIDE_LAYER)])]:
            # a folder kept from an earlier session (CGFAST_E2E_OUT) would add its trace,
            # another process, to the side
            shutil.rmtree(out_dir(tmp, f"runs_{name}_{k}"))
            folders[name].append(profiled(tmp, f"runs_{name}_{k}", "eager", *args))
    return folders


def compared(base: list, test: list) -> tuple:
    """``diff`` of the folders of ``base`` against those of ``test``, with the gate at 5%."""
    more = [
        *(a for b in base[1:] for a in ("--base", str(b))),
        *(a for t in test[1:] for a in ("--test", str(t))),
    ]
    return diff(base[0], test[0], *more, "--fail-if-slower", "5")


def run_figures(status: int, report: dict) -> dict:
    figures = figures_of(status, report)
    figures["runs"] = report["runs"]
    figures["ci_pct_of_values"] = {r["value"]: r["ci_pct"] for r in report["rows"] if r["ci_pct"]}
    return figures


def test_three_runs_of_one_program_against_three_more_change_nothing(runs):
    status, report, table = compared(runs["base"], runs["again"])
    record("unchanged_3_runs", run_figures(status, report))
    assert (report["runs"]["base"], report["runs"]["test"], report["runs"]["between_runs"]) == (
        RUNS,
        RUNS,
        True,
    ), table
    assert report["base"]["replays"] == report["test"]["replays"] == RUNS * STEPS * REPLAYS_PER_STEP
    assert report["by"] == "module" and len(report["rows"]) > 20
    assert all(r["runs"] == {"base": RUNS, "test": RUNS} for r in report["rows"]), table
    changed = [
        (r["value"], r["verdict"]) for r in [*report["rows"], *report["tree"]] if r["verdict"] != "same"
    ]
    assert changed == [], table
    assert status == 0, table


def test_a_wider_mlp_in_three_runs_is_slower_and_only_it_and_its_ancestors(runs):
    status, report, table = compared(runs["base"], runs["wide"])
    record("wide_mlp_3_runs", run_figures(status, report))
    assert report["runs"]["between_runs"] is True, table

    def inside(value):
        return value is not None and (value == MODULE or value.startswith(MODULE + "."))

    tree = {r["value"]: r for r in report["tree"]}
    assert tree[MODULE]["verdict"] == "slower" and tree[MODULE]["ci_us"][0] > 0, table
    for path in ANCESTORS:
        assert tree[path]["verdict"] == "slower", (path, table)
    assert any(inside(r["value"]) and r["verdict"] == "slower" for r in report["rows"]), table
    others = [
        (r["value"], r["verdict"])
        for r in [*report["rows"], *report["tree"]]
        if r["verdict"] != "same" and not inside(r["value"]) and r["value"] not in ANCESTORS
    ]
    assert others == [], table
    assert status == 3 and f"cgfast: slower: {MODULE}" in table, table
