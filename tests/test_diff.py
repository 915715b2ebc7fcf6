"""`cgfast diff` and `cgfast.diff`: verdicts, the statistics against an independent
reckoning, formats, the gate, ranks, keys and bad input."""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import random
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from trace_files import cgfast, kernel

cg = pytest.importorskip("cgfast")

# (module or None, kernel name, µs): one replay of a small two-layer model.
MODEL = [
    ("model.embed", "embedding_kernel", 8.0),
    ("model.layers.0.attn", "gemm_qkv", 30.0),
    ("model.layers.0.attn", "softmax", 10.0),
    ("model.layers.0.mlp", "gemm_up", 40.0),
    ("model.layers.0.mlp", "gelu", 6.0),
    ("model.layers.1.attn", "gemm_qkv", 30.0),
    ("model.layers.1.attn", "softmax", 10.0),
    ("model.layers.1.mlp", "gemm_up", 40.0),
    ("model.layers.1.mlp", "gelu", 6.0),
    ("model.norm", "norm", 5.0),
    ("lm_head", "gemm_head", 25.0),
    (None, "Memcpy DtoD (Device -> Device)", 3.0),
]


def model_events(
    replays: int,
    *,
    seed: int = 0,
    scale: Optional[Dict[str, float]] = None,
    kernels: Optional[List[tuple]] = None,
    noise: float = 0.02,
    first_replay: int = 100,
) -> List[Dict[str, Any]]:
    """`replays` replays of `kernels` (MODEL), one after the other on one lane, each
    kernel's time scaled by `scale[its module]` and by up to ±noise/2 of noise."""
    rng = random.Random(seed)
    scale = scale or {}
    events, ts = [], 1000.0
    for r in range(replays):
        for node, (module, name, us) in enumerate(kernels or MODEL, start=1):
            dur = round(us * scale.get(module, 1.0) * (1 + noise * (rng.random() - 0.5)), 3)
            extra = {"module": module} if module else {}
            events.append(kernel(round(ts, 3), dur, name=name, replay=first_replay + r, node=node, **extra))
            ts += dur + 0.5
        ts += 40.0
    return events


def write(path: Path, events: List[Dict[str, Any]], top: Optional[Dict[str, Any]] = None) -> Path:
    text = json.dumps({"schemaVersion": 1, **(top or {}), "traceEvents": events})
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def report_of(*args, status: int = 0) -> Dict[str, Any]:
    run = cgfast("diff", *args, "--format", "json")
    assert run.returncode == status, run.stderr
    return json.loads(run.stdout)


def rows_by_value(report) -> Dict[Any, Dict[str, Any]]:
    return {r["value"]: r for r in report["rows"]}


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """base: 30 replays; test: 24 replays with layers.1.mlp 10% slower and lm_head 8% faster."""
    d = tmp_path_factory.mktemp("pair")
    base = write(d / "base.annotated.json", model_events(30, seed=1))
    test = write(
        d / "test.annotated.json.gz",
        model_events(24, seed=2, scale={"model.layers.1.mlp": 1.10, "lm_head": 0.92}),
    )
    return base, test


# ---------------------------------------------------------------------------- the statistics, independently


def u_counts(m: int, n: int) -> List[int]:
    """How many of the C(m+n, m) orderings give each U = 0..mn: the coefficients of the
    Gaussian binomial [m+n choose m](q), multiplied out in exact integers."""
    poly = [1]
    for i in range(1, m + 1):
        # times (1 - q^(n+i))
        shifted = [0] * (n + i) + poly
        poly = [a - b for a, b in zip(poly + [0] * (n + i), shifted)]
        # divided by (1 - q^i): each coefficient plus the one i below it, in order
        for u in range(i, len(poly)):
            poly[u] += poly[u - i]
        while poly and poly[-1] == 0:
            poly.pop()
    return poly


def hodges_lehmann(base: List[float], test: List[float]):
    """(estimate, low, high) from all m*n differences, written out."""
    diffs = sorted(t - b for t in test for b in base)
    m, n = len(base), len(test)
    estimate = statistics.median(diffs)
    if m * n <= 2500:
        counts = u_counts(m, n)
        total = math.comb(m + n, m)
        # the largest k with P(U <= k - 1) <= 2.5%
        cumulative = [sum(counts[: u + 1]) for u in range(len(counts))]
        k = sum(1 for c in cumulative if c * 40 <= total)
    else:
        values = sorted(base + test)
        ties = sum(values.count(v) ** 3 - values.count(v) for v in set(values))
        big_n = m + n
        sigma = math.sqrt(m * n / 12 * ((big_n + 1) - ties / (big_n * (big_n - 1))))
        k = math.floor(m * n / 2 + 0.5 - 1.959963984540054 * sigma)
    if k < 1:
        return estimate, None, None
    return estimate, diffs[k - 1], diffs[m * n - k]


def per_replay(events, module) -> List[float]:
    """A module's time per replay, summed over its kernels (none overlap here)."""
    times: Dict[int, float] = {}
    for e in events:
        if e["args"].get("module") == module:
            c = e["args"]["correlation"]
            times[c] = times.get(c, 0.0) + round(e["dur"] * 1000) / 1000
    return list(times.values())


def test_gaussian_binomial_counts_are_the_orderings():
    assert u_counts(2, 2) == [1, 1, 2, 1, 1]
    assert sum(u_counts(10, 12)) == math.comb(22, 10)


@pytest.mark.parametrize("sizes", [(30, 24), (70, 65)], ids=["exact", "normal approximation"])
def test_shifts_and_intervals_against_an_independent_reckoning(tmp_path, sizes):
    m, n = sizes
    base_events = model_events(m, seed=3, noise=0.05)
    test_events = model_events(n, seed=4, noise=0.05, scale={"model.layers.0.mlp": 1.04})
    base = write(tmp_path / "b.annotated.json", base_events)
    test = write(tmp_path / "t.annotated.json", test_events)
    rows = rows_by_value(report_of(base, test))
    for module in ("model.layers.0.mlp", "model.layers.1.mlp", "model.embed", "lm_head"):
        b, t = per_replay(base_events, module), per_replay(test_events, module)
        estimate, low, high = hodges_lehmann(b, t)
        r = rows[module]
        assert r["delta_us"] == pytest.approx(estimate, abs=1e-9), module
        assert r["ci_us"] == [pytest.approx(low, abs=1e-9), pytest.approx(high, abs=1e-9)], module
        assert r["base_us"] == pytest.approx(statistics.median(b), abs=1e-9)
        assert r["test_us"] == pytest.approx(statistics.median(t), abs=1e-9)
        assert r["delta_pct"] == pytest.approx(100 * estimate / statistics.median(b))
        assert (r["base"]["replays"], r["test"]["replays"]) == (m, n)
    assert rows["model.layers.0.mlp"]["verdict"] == "slower"
    assert rows["model.layers.1.mlp"]["verdict"] == "same"


# ---------------------------------------------------------------------------- what it says


def test_the_changed_modules_and_only_they_change(pair):
    base, test = pair
    report = report_of(base, test)
    assert (report["by"], report["by_default"], report["by_note"]) == ("module", True, None)
    assert (report["base"]["replays"], report["test"]["replays"]) == (30, 24)
    assert report["confidence"] == 0.95 and report["threshold_pct"] == 2.0
    rows = rows_by_value(report)
    verdicts = {v: r["verdict"] for v, r in rows.items() if r["verdict"] != "same"}
    assert verdicts == {"model.layers.1.mlp": "slower", "lm_head": "faster"}
    mlp = rows["model.layers.1.mlp"]
    assert mlp["delta_pct"] == pytest.approx(10, abs=1)
    assert mlp["ci_us"][0] > 0 and mlp["ci_pct"][0] > 2
    assert rows["lm_head"]["ci_us"][1] < 0
    # rows by how much of the change of the mean they account for, largest first
    contributions = [abs(r["contribution_us"]) for r in report["rows"]]
    assert contributions == sorted(contributions, reverse=True)
    assert report["rows"][0]["value"] == "model.layers.1.mlp"
    # what each row accounts for adds up to the change of the mean busy time per replay
    assert sum(r["contribution_us"] for r in report["rows"]) == pytest.approx(
        report["mean_delta_us"], abs=1e-6
    )
    flagged = sum(r["contribution_us"] for r in report["rows"] if r["verdict"] != "same")
    assert report["explained"] == pytest.approx(flagged / report["mean_delta_us"])
    # total: +4.6 - 2 of about 213 µs: +1.2%, under the threshold
    total = report["total"]
    assert total["value"] is None and total["verdict"] == "same"
    assert total["delta_us"] == pytest.approx(2.6, abs=0.6)
    # the tree: the changed modules and their ancestors
    # (+4.6 µs is 10% of the MLP, 5.3% of its layer, 2.7% of the layers, 2.5% of the model)
    changed = {r["value"]: r["verdict"] for r in report["tree"] if r["verdict"] != "same"}
    assert changed == {
        "model.layers.1.mlp": "slower",
        "model.layers.1": "slower",
        "model.layers": "slower",
        "model": "slower",
        "lm_head": "faster",
    }
    assert [r["value"] for r in report["tree"]][:3] == ["lm_head", "model", "model.embed"]
    # kernel lines: both kernels of the MLP, in full in JSON
    names = mlp["kernels"]["names"]
    assert [k["name"] for k in names] == ["gemm_up", "gelu"]
    assert names[0]["side"] == "both" and names[0]["delta_us"] == pytest.approx(4.0, abs=0.3)
    assert (names[0]["base_kernels"], names[0]["test_kernels"]) == (30, 24)
    assert (mlp["kernels"]["base_per_replay"], mlp["kernels"]["test_per_replay"]) == (2, 2)


def test_new_and_gone_values_and_kernels(tmp_path):
    extra = [*MODEL[:-1], ("model.layers.1.mlp", "triton_poi_fused_mul_3", 4.0), MODEL[-1]]
    gone = [k for k in MODEL if k[0] != "model.norm"]
    added = [*MODEL, ("model.layers.2.mlp", "gemm_up", 40.0)]
    base = write(tmp_path / "b.annotated.json", model_events(20, seed=1))
    for kernels, value, verdict in [
        (extra, "model.layers.1.mlp", "slower"),
        (gone, "model.norm", "gone"),
        (added, "model.layers.2.mlp", "new"),
    ]:
        test = write(tmp_path / "t.annotated.json", model_events(20, seed=2, kernels=kernels))
        row = rows_by_value(report_of(base, test))[value]
        assert row["verdict"] == verdict
        if verdict == "slower":
            new = row["kernels"]["names"][0]
            assert (new["name"], new["side"], new["test_per_replay"]) == ("triton_poi_fused_mul_3", "test", 1)
            assert (row["kernels"]["base_per_replay"], row["kernels"]["test_per_replay"]) == (2, 3)
        elif verdict == "gone":
            assert (
                row["test"] is None and row["ci_us"] is None and row["delta_us"] == pytest.approx(-5, abs=0.1)
            )
        else:
            assert (
                row["base"] is None
                and row["delta_pct"] is None
                and row["delta_us"] == pytest.approx(40, abs=1)
            )
        table = cgfast("diff", base, test, "--top", "1")
        assert table.returncode == 0, table.stderr
        line = next(line for line in table.stdout.splitlines() if line.lstrip().startswith(value + " "))
        assert verdict in line.split()


def test_a_sure_change_too_small_for_the_replay_is_the_same(tmp_path):
    """On an H200, modules left unchanged moved by a few 32 ns timer ticks (+3%, 0.01% of
    the replay) when another layer was widened: sure, not of their doing. Such a change
    (here: the 5 µs norm +3%, 0.15 µs of a 213 µs replay) is `same` under --min-change
    (0.1% of the busy time per replay); --min-change 0 calls it slower, as before."""
    base = write(tmp_path / "b.annotated.json", model_events(30, seed=1, noise=0.002))
    test = write(
        tmp_path / "t.annotated.json", model_events(30, seed=2, noise=0.002, scale={"model.norm": 1.03})
    )
    default = report_of(base, test)
    assert default["min_change_pct"] == 0.1
    norm = rows_by_value(default)["model.norm"]
    assert norm["ci_us"][0] > 0 and norm["delta_pct"] > 2.5
    assert norm["verdict"] == "same" and all(r["verdict"] == "same" for r in default["tree"])
    off = report_of(base, test, "--min-change", "0")
    assert rows_by_value(off)["model.norm"]["verdict"] == "slower"
    assert {r["value"] for r in off["tree"] if r["verdict"] != "same"} == {"model.norm"}
    assert cg.diff(base, test, min_change=0) == off
    # the method line says what is the same; without the floor, exactly as before it
    method = cgfast("diff", base, test).stdout.splitlines()[1]
    assert method.endswith(
        "same: the interval holds 0 or the change is under 2.0% of the value or under 0.1% of the busy time per replay"
    )
    method = cgfast("diff", base, test, "--min-change", "0.23").stdout.splitlines()[1]
    assert method.endswith("or under 0.23% of the busy time per replay")
    method = cgfast("diff", base, test, "--min-change", "0").stdout.splitlines()[1]
    assert method.endswith("same: the interval holds 0 or the change is under 2.0%")


def test_the_table(pair):
    base, test = pair
    run = cgfast("diff", base, test)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "cgfast diff by args.module: base 1 trace, 30 replays; test 1 trace, 24 replays"
    assert lines[1].startswith(
        "  method         the Hodges-Lehmann shift of the times per replay, 95% interval"
    )
    assert lines[2].startswith("  total          busy per replay: base ") and lines[2].endswith(": same")
    assert lines[3].startswith("  explained      the 2 values listed account for ")
    header = next(line for line in lines if line.lstrip().startswith("module "))
    assert header.split()[:3] == ["module", "verdict", "kernels/replay"]
    body = lines[lines.index(header) + 1 :]
    assert body[0].split()[:2] == ["model.layers.1.mlp", "slower"]
    assert body[1].strip().startswith("~ gemm_up: ") and " µs (+" in body[1]
    assert any(line.split()[:2] == ["lm_head", "faster"] for line in body)
    assert "  (6 values the same; --all lists them)" in lines
    assert "  every path with the paths under it:" in lines
    everything = cgfast("diff", base, test, "--all", "--top", "0").stdout.splitlines()
    assert sum(1 for line in everything if " same " in line) >= 8
    assert not any(line.strip().startswith("~") for line in everything)


def test_csv(pair):
    base, test = pair
    run = cgfast("diff", base, test, "--format", "csv")
    assert run.returncode == 0, run.stderr
    rows = list(csv.DictReader(io.StringIO(run.stdout)))
    assert rows[0]["kind"] == "total" and rows[0]["value"] == ""
    values = [r for r in rows if r["kind"] == "value"]
    assert {r["value"] for r in values} == {m for m, _, _ in MODEL if m} | {""}
    json_rows = rows_by_value(report_of(base, test))
    for r in values:
        j = json_rows[r["value"] or None]
        assert r["verdict"] == j["verdict"]
        assert float(r["delta_us"]) == pytest.approx(j["delta_us"], abs=1e-3)
        assert float(r["ci_low_us"]) == pytest.approx(j["ci_us"][0], abs=1e-3)
        assert int(r["base_replays"]) == 30
    assert any(r["kind"] == "path" and r["value"] == "model.layers.1" for r in rows)


# ---------------------------------------------------------------------------- real GPU traces

REAL = Path(__file__).resolve().parent / "data" / "diff"


def test_real_gpu_traces_the_same_program_twice():
    """tests/data/diff: a Llama of 3 layers on an H200, run twice (see its README)."""
    run = cgfast(
        "diff",
        REAL / "llama3-base.annotated.json.gz",
        REAL / "llama3-again.annotated.json.gz",
        "--fail-if-slower",
        "5",
        "--format",
        "json",
    )
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert (report["base"]["replays"], report["test"]["replays"]) == (120, 120)
    assert report["total"]["verdict"] == "same" and report["gate"]["failed"] is False
    assert [r["value"] for r in [*report["rows"], *report["tree"]] if r["verdict"] != "same"] == []


def test_real_gpu_traces_a_wider_mlp_and_only_it_and_its_ancestors():
    """Layer 1's MLP three times wider: its values and the paths holding it are slower,
    nothing else, though modules left as they were moved by a few timer ticks."""
    base, wide = REAL / "llama3-base.annotated.json.gz", REAL / "llama3-wide-mlp.annotated.json.gz"
    report = report_of(base, wide, "--fail-if-slower", "5", status=3)
    mlp = "model.layers.1.mlp"
    changed = {r["value"]: r["verdict"] for r in report["rows"] if r["verdict"] != "same"}
    assert set(changed.values()) == {"slower"} and all(v == mlp or v.startswith(mlp + ".") for v in changed)
    assert {f"{mlp}.up_proj", f"{mlp}.gate_proj", f"{mlp}.down_proj"} <= set(changed)
    tree = {r["value"] for r in report["tree"] if r["verdict"] != "same"}
    assert {"model", "model.layers", "model.layers.1", mlp} <= tree
    assert all(
        v == mlp or v.startswith(mlp + ".") or v in ("model", "model.layers", "model.layers.1") for v in tree
    )
    # the GEMMs take longer, and down_proj runs another cuBLAS kernel
    down = next(r for r in report["rows"] if r["value"] == f"{mlp}.down_proj")
    assert {k["side"] for k in down["kernels"]["names"]} == {"base", "test"}
    assert report["total"]["delta_pct"] == pytest.approx(21, abs=1)
    # without the floor, the act_fn of layers 0 and 2 (3.01 -> 3.10 µs) are called slower
    off = report_of(base, wide, "--min-change", "0")
    assert {"model.layers.0.mlp.act_fn", "model.layers.2.mlp.act_fn"} <= {
        r["value"] for r in off["rows"] if r["verdict"] == "slower"
    }


# ---------------------------------------------------------------------------- the gate


def test_the_gate(pair, tmp_path):
    base, test = pair
    passed = cgfast("diff", base, test, "--fail-if-slower", "15")
    assert passed.returncode == 0, passed.stderr
    tripped = cgfast("diff", base, test, "--fail-if-slower", "5")
    assert tripped.returncode == 3
    assert tripped.stdout.startswith("cgfast diff by args.module")
    offenders = tripped.stderr.splitlines()
    assert len(offenders) == 1 and offenders[0].startswith("cgfast: slower: model.layers.1.mlp +")
    assert offenders[0].endswith("over the 5% gate")
    report = report_of(base, test, "--fail-if-slower", "5", status=3)
    gate = report["gate"]
    assert (gate["failed"], gate["fail_if_slower_pct"], gate["min_share_pct"]) == (True, 5.0, 1.0)
    assert [(o["value"], o["total"], o["rank"]) for o in gate["offenders"]] == [
        ("model.layers.1.mlp", False, None)
    ]
    # values under --min-share are not gated; the total is
    assert cgfast("diff", base, test, "--fail-if-slower", "5", "--min-share", "30").returncode == 0
    slow = write(
        tmp_path / "slow.annotated.json", model_events(24, seed=5, scale={m: 1.2 for m, _, _ in MODEL})
    )
    run = cgfast("diff", base, slow, "--fail-if-slower", "5", "--min-share", "30")
    assert run.returncode == 3 and run.stderr.startswith("cgfast: slower: the busy time per replay +")
    # a trace against itself passes at 0%
    assert cgfast("diff", base, base, "--fail-if-slower", "0").returncode == 0
    # the help says what status 3 is
    assert "3 when --fail-if-slower trips" in cgfast("diff", "--help").stdout


# ---------------------------------------------------------------------------- sides of several traces, ranks


def test_sides_of_several_traces(tmp_path):
    base_dir, test_dir = tmp_path / "base", tmp_path / "test"
    base_dir.mkdir()
    test_dir.mkdir()
    for k in range(3):
        write(base_dir / f"b{k}.annotated.json", model_events(10 + k, seed=k, first_replay=100))
    write(test_dir / "t0.annotated.json.gz", model_events(17, seed=7))
    write(test_dir / "t1.annotated.json", model_events(5, seed=8))
    write(test_dir / "raw.pt.trace.json", model_events(5, seed=9))  # not an output of annotate
    by_dirs = report_of(base_dir, test_dir)
    assert (by_dirs["base"]["replays"], by_dirs["base"]["traces"]) == (33, 3)
    assert (by_dirs["test"]["replays"], by_dirs["test"]["traces"]) == (22, 2)
    assert [Path(t["path"]).name for t in by_dirs["traces"]["test"]] == [
        "t0.annotated.json.gz",
        "t1.annotated.json",
    ]
    by_glob = report_of(f"{base_dir}/b*.json", f"{test_dir}/t*.json*")
    assert by_glob["rows"] == by_dirs["rows"]
    by_flags = report_of(
        "--base", base_dir / "b0.annotated.json", "--base", base_dir / "b1.annotated.json",
        "--base", base_dir / "b2.annotated.json", "--test", test_dir,
    )  # fmt: skip
    assert by_flags["rows"] == by_dirs["rows"]
    assert all(r["verdict"] == "same" for r in by_dirs["rows"])


def test_ranks_pooled_or_apart(tmp_path):
    """Rank from distributedInfo (base) and from the file name (test, as trace_handler names them)."""
    info = lambda rank: {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2}}  # noqa: E731
    base = [write(tmp_path / f"b{r}.annotated.json", model_events(20, seed=r), top=info(r)) for r in (0, 1)]
    test = [
        write(tmp_path / "000000.h_1.1.pt.trace.annotated.json", model_events(20, seed=10)),
        write(
            tmp_path / "000001.h_2.1.pt.trace.annotated.json",
            model_events(20, seed=11, scale={"model.layers.0.attn": 1.25}),
        ),
    ]
    args = ["--base", base[0], "--base", base[1], "--test", test[0], "--test", test[1]]
    pooled = report_of(*args)
    assert "ranks" not in pooled
    assert [t["rank"] for t in pooled["traces"]["base"] + pooled["traces"]["test"]] == [0, 1, 0, 1]
    per_rank = report_of(*args, "--per-rank")
    assert per_rank["rows"] == pooled["rows"]
    verdicts = [(r["rank"], rows_by_value(r)["model.layers.0.attn"]["verdict"]) for r in per_rank["ranks"]]
    assert verdicts == [(0, "same"), (1, "slower")]
    table = cgfast("diff", *args, "--per-rank").stdout
    assert "\nrank 1: base 1 trace, 20 replays; test 1 trace, 20 replays\n" in table
    run = cgfast("diff", *args, "--per-rank", "--fail-if-slower", "10")
    assert run.returncode == 3
    assert any(
        line.startswith("cgfast: slower: rank 1: model.layers.0.attn +") for line in run.stderr.splitlines()
    )
    lines = list(csv.DictReader(io.StringIO(cgfast("diff", *args, "--per-rank", "--format", "csv").stdout)))
    assert {line["rank"] for line in lines} == {"", "0", "1"}


# ---------------------------------------------------------------------------- keys


def test_keys(tmp_path):
    modules = write(tmp_path / "m.annotated.json", model_events(10, seed=1))
    labelled = model_events(10, seed=2)
    for e in labelled:
        if "module" in e["args"]:
            e["args"]["name"] = e["args"].pop("module")
    names = write(tmp_path / "n.annotated.json", labelled)
    bare_events = model_events(10, seed=3)
    for e in bare_events:
        e["args"].pop("module", None)
    bare = write(tmp_path / "bare.annotated.json", bare_events)

    by_name = cgfast("diff", names, names)
    assert by_name.stdout.splitlines()[0].startswith(
        "cgfast diff by args.name (no graphed kernel carries args.module): base 1 trace"
    )
    by_kernel = report_of(bare, bare)
    assert by_kernel["by"] == "kernel"
    assert by_kernel["by_note"] == "no graphed kernel carries args.module or args.name"
    assert {r["value"] for r in by_kernel["rows"]} == {name for _, name, _ in MODEL}
    table = cgfast("diff", bare, bare)
    assert table.stdout.startswith(
        "cgfast diff by kernel name (no graphed kernel carries args.module or args.name)"
    )
    # explicit keys
    assert {r["value"] for r in report_of(modules, names, "--by", "kernel")["rows"]} == {
        n for _, n, _ in MODEL
    }
    stream = report_of(modules, modules, "--by", "stream")
    assert [r["value"] for r in stream["rows"]] == ["7"]
    # one side carries the key, the other does not: one line, status 1
    for args, message in [
        (
            (modules, names),
            "the base traces carry args.module and the test traces do not (their best key is args.name)",
        ),
        ((names, modules, "--by", "module"), "args.module is on the test traces only"),
    ]:
        run = cgfast("diff", *args)
        assert run.returncode == 1 and run.stderr.startswith("cgfast: error: " + message), run.stderr
        assert len(run.stderr.splitlines()) == 1 and run.stdout == ""


def test_rolled_up(pair):
    base, test = pair
    report = report_of(base, test, "--group-layers", "--depth", "3")
    assert (report["depth"], report["group_layers"]) == (3, True)
    rows = rows_by_value(report)
    assert set(rows) == {"model.embed", "model.layers.*", "model.norm", "lm_head", None}
    assert rows["model.layers.*"]["base"]["kernels_per_replay"] == 8
    assert "values         rolled up to their first 3 dotted segments; numbered layers merged as *" in (
        cgfast("diff", base, test, "--group-layers", "--depth", "3").stdout
    )
    assert "tree" not in report_of(base, test, "--no-hierarchy")
    assert "tree" in report_of(base, test, "--by", "kernel", "--hierarchy")


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "args, message",
    [
        (["b.annotated.json", "missing.annotated.json"], "missing.annotated.json: no such file"),
        (["b.annotated.json", "cut.annotated.json"], "cut.annotated.json: the trace is truncated"),
        (["b.annotated.json", "eager.annotated.json"], "the test trace has no graphed kernels"),
        (
            ["b.annotated.json", "empty_dir"],
            "no annotated traces (*.annotated.json or *.annotated.json.gz) under",
        ),
        (["b.annotated.json"], "no test traces: give BASE and TEST (or --base and --test)"),
        (
            ["b.annotated.json", "b.annotated.json", "--chart", "c.png"],
            "the chart must be a .svg or .html file",
        ),
        (["b.annotated.json", "b.annotated.json", "--by", ""], "--by needs a key"),
        (["b.annotated.json", "b.annotated.json", "--per-rank"], "no rank for --per-rank"),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, args, message):
    write(tmp_path / "b.annotated.json", model_events(5))
    (tmp_path / "cut.annotated.json").write_text('{"traceEvents": [1, 2,')
    write(tmp_path / "eager.annotated.json", [kernel(1, 2, node=0)])
    (tmp_path / "empty_dir").mkdir()
    chart = tmp_path / "c.html"
    chart.write_text("kept")
    run = cgfast("diff", *args, *([] if "--chart" in args else ["--chart", "c.html"]), cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cgfast: error: ") and message in lines[0], run.stderr
    assert run.stdout == ""
    assert chart.read_text() == "kept"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize(
    "args",
    [
        ["--threshold=-1"],
        ["--fail-if-slower", "x"],
        ["--min-share", "nan"],
        ["--min-change=-1"],
        ["--depth", "0"],
    ],
)
def test_bad_flags(tmp_path, args):
    trace = write(tmp_path / "b.annotated.json", model_events(5))
    run = cgfast("diff", trace, trace, *args)
    assert run.returncode == 2 and "error: invalid value" in run.stderr


# ---------------------------------------------------------------------------- Python


def test_python_gives_the_same_report(pair, tmp_path):
    base, test = pair
    assert cg.diff(base, test) == report_of(base, test)
    assert cg.diff([base], [str(test)], "module", threshold=5, fail_if_slower=5) == report_of(
        base, test, "--by", "module", "--threshold", "5", "--fail-if-slower", "5", status=3
    )
    chart = tmp_path / "d.svg"
    cg.diff(base, test, chart=chart, depth=2)
    assert chart.read_text().startswith("<svg")
    with pytest.raises(cg.TraceError, match="no such file"):
        cg.diff(base, tmp_path / "missing.annotated.json")
    with pytest.raises(cg.TraceError, match=r"the base traces carry args\.module"):
        labelled = model_events(5)
        for e in labelled:
            e["args"]["name"] = e["args"].pop("module", "x")
        cg.diff(base, write(tmp_path / "n.annotated.json", labelled))
    with pytest.raises(ValueError, match="threshold must be a percentage"):
        cg.diff(base, test, threshold=-2)
    with pytest.raises(ValueError, match="min_change must be a percentage"):
        cg.diff(base, test, min_change=float("nan"))
    with pytest.raises(ValueError, match="the chart must be"):
        cg.diff(base, test, chart=tmp_path / "x.png")
    with pytest.raises(ValueError, match="frame must be"):
        cg.diff(base, test, frame="polars")  # type: ignore[arg-type]


def test_python_data_frames(pair):
    pandas = pytest.importorskip("pandas")
    base, test = pair
    report = cg.diff(base, test, frame="pandas")
    rows, tree = report["rows"], report["tree"]
    assert isinstance(rows, pandas.DataFrame) and isinstance(tree, pandas.DataFrame)
    slower = rows[rows["verdict"] == "slower"]
    assert slower["value"].tolist() == ["model.layers.1.mlp"]
    assert {"base_median_us", "test_replays", "kernels_names"} <= set(rows.columns)
    assert rows["base_replays"].unique().tolist() == [30]
