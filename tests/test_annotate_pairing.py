"""`cgfast annotate DIR` and `cgfast annotate TRACES -a DIR`: the traces a program's own
profiler wrote, anywhere and named anyhow, each annotated with the file of the process
that exported it, which lists it under "traces" (as `cgfast run` saves them)."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from cgfast.annotations import load_annotations, load_graphs, save_annotations
from helpers import assert_clean_failure, python_cli, run_cli

pytest.importorskip("cgfast._cgfast")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "h200-compiled-transformer"
TRACE = EXAMPLE / "000000.h200.pt.trace.json.gz"
ANNOTATIONS = EXAMPLE / "kernel_annotations_rank0_422.json"
# what the second process's modules are called, so that each trace shows whose file it got
SECOND = "second."


def save_process_file(path: Path, traces: list[Path], prefix: str = "") -> Path:
    """The example's annotations (modules renamed with `prefix`) and topology, saved as
    the annotation file of a process that exported `traces`."""
    annotations = {
        node: [{**item, "module": prefix + item["module"]} if "module" in item else item for item in items]
        for node, items in load_annotations(ANNOTATIONS).items()
    }
    save_annotations(path, annotations, graphs=load_graphs(ANNOTATIONS), traces=traces)
    return path


@pytest.fixture
def program(tmp_path):
    """Two processes of one program (both rank 0: no RANK in their environment): each
    exported a trace into `profiles/` as tensorboard_trace_handler names them (no rank in
    the name) and saved its annotation file into `out/`, listing that trace."""
    out, profiles = tmp_path / "out", tmp_path / "profiles"
    out.mkdir()
    profiles.mkdir()
    first, second = profiles / "worker0.111.pt.trace.json.gz", profiles / "worker0.222.pt.trace.json.gz"
    for trace in (first, second):
        shutil.copyfile(TRACE, trace)
    save_process_file(out / "kernel_annotations_rank0_111.json", [first])
    save_process_file(out / "kernel_annotations_rank0_222.json", [second], prefix=SECOND)
    return tmp_path, first, second


def output_of(trace: Path) -> Path:
    return trace.with_name(trace.name.replace(".json.gz", ".annotated.json.gz"))


def modules_in(trace: Path) -> set[str]:
    """The modules the annotated kernels of `trace`'s output carry."""
    events = json.loads(gzip.decompress(output_of(trace).read_bytes()))["traceEvents"]
    return {e["args"]["module"] for e in events if e.get("cat") == "kernel" and "module" in e.get("args", {})}


def check_annotated_by_their_own_process(first: Path, second: Path) -> None:
    own, other = modules_in(first), modules_in(second)
    assert own and not any(m.startswith(SECOND) for m in own)
    assert other == {SECOND + m for m in own}


@pytest.mark.parametrize("command", [None, python_cli()], ids=["binary", "python -m cgfast"])
def test_a_directory_of_annotation_files_annotates_every_trace_they_list(program, command):
    root, first, second = program
    run = run_cli("annotate", "out", "--json", cwd=root, command=command)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
    report = json.loads(run.stdout)
    assert (report["traces"], report["annotated_traces"], report["failed"]) == (2, 2, [])
    assert {r["input"]: r["annotations"] for r in report["reports"]} == {
        str(first): "out/kernel_annotations_rank0_111.json",
        str(second): "out/kernel_annotations_rank0_222.json",
    }
    assert all(r["annotated"] > 0 for r in report["reports"])
    check_annotated_by_their_own_process(first, second)
    assert sorted(p.name for p in (root / "out").iterdir()) == [
        "kernel_annotations_rank0_111.json",
        "kernel_annotations_rank0_222.json",
    ], "outputs are written beside their traces"


def test_traces_in_the_directory_too_are_annotated_once_each(program):
    root, first, second = program
    beside = root / "out" / "000001.9.pt.trace.json.gz"  # listed by no file: by its rank
    shutil.copyfile(TRACE, beside)
    shutil.copyfile(ANNOTATIONS, root / "out" / "kernel_annotations_rank1_9.json")
    moved = root / "out" / first.name  # listed where it now is
    shutil.move(first, moved)
    save_process_file(root / "out" / "kernel_annotations_rank0_111.json", [moved])
    run = run_cli("annotate", "out", "--json", cwd=root)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert [(r["input"], r["annotations"]) for r in report["reports"]] == [
        ("out/000001.9.pt.trace.json.gz", "out/kernel_annotations_rank1_9.json"),
        ("out/worker0.111.pt.trace.json.gz", "out/kernel_annotations_rank0_111.json"),
        (str(second), "out/kernel_annotations_rank0_222.json"),
    ]
    check_annotated_by_their_own_process(moved, second)


def test_traces_given_are_paired_with_the_files_of_a_directory(program):
    root, first, second = program
    one = run_cli("annotate", second, "-a", "out", "--json", cwd=root)
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout)["annotations"] == "out/kernel_annotations_rank0_222.json"
    assert not output_of(first).exists()
    several = run_cli("annotate", "profiles", "-a", "out", "--json", cwd=root)
    assert several.returncode == 0, several.stderr
    assert [r["annotations"] for r in json.loads(several.stdout)["reports"]] == [
        "out/kernel_annotations_rank0_111.json",
        "out/kernel_annotations_rank0_222.json",
    ]
    check_annotated_by_their_own_process(first, second)


def test_with_a_directory_an_unlisted_trace_gets_its_ranks_file_there_or_one_line(program):
    root = program[0]
    ranked = root / "profiles" / "000003.7.pt.trace.json.gz"
    shutil.copyfile(TRACE, ranked)
    shutil.copyfile(ANNOTATIONS, root / "out" / "kernel_annotations_rank3_7.json")
    run = run_cli("annotate", ranked, "-a", "out", "--json", cwd=root)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["annotations"] == "out/kernel_annotations_rank3_7.json"
    for name, why in [
        ("000004.7.pt.trace.json.gz", "none there is rank 4's (kernel_annotations_rank4_*.json or .pkl)"),
        ("worker1.7.pt.trace.json.gz", "its name starts with no rank to find one by"),
    ]:
        trace = root / "profiles" / name
        shutil.copyfile(TRACE, trace)
        line = assert_clean_failure(run_cli("annotate", trace, "-a", "out", cwd=root))
        assert line.startswith(f"cgfast: error: no annotation file in out lists {trace}, and {why}")
        assert line.endswith("; use -a FILE to name its annotations")
        assert not output_of(trace).exists()


def test_a_listed_trace_that_is_gone_is_left_out_with_a_warning(program):
    root, first, second = program
    gone = root / "profiles" / "worker0.333.pt.trace.json.gz"
    save_process_file(root / "out" / "kernel_annotations_rank0_111.json", [first, gone])
    run = run_cli("annotate", "out", cwd=root)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("cgfast annotate: 2 traces, 2 annotated\n")
    assert run.stderr == (
        f"cgfast: warning: a trace that an annotation file lists does not exist, left out: {gone}\n"
    )
    check_annotated_by_their_own_process(first, second)
    first.unlink()
    run = run_cli("annotate", "out", cwd=root)
    assert run.returncode == 0, run.stderr
    assert run.stderr == (
        f"cgfast: warning: 2 traces that annotation files list do not exist, left out; the first: {first}\n"
    )
    second.unlink()
    assert_clean_failure(run_cli("annotate", "out", cwd=root), mention="no traces")


def test_a_trace_listed_by_two_files_is_one_line_and_nothing_is_written(program):
    root, first, second = program
    save_process_file(root / "out" / "kernel_annotations_rank0_222.json", [second, first])
    for args in (["out"], [first, "-a", "out"], ["profiles", "-a", "out"]):
        line = assert_clean_failure(run_cli("annotate", *args, cwd=root))
        assert line == (
            f"cgfast: error: {first} is listed by two annotation files, out/kernel_annotations_rank0_111.json "
            "and out/kernel_annotations_rank0_222.json; annotate it with the right one named"
        )
    assert not output_of(first).exists() and not output_of(second).exists()


@pytest.mark.parametrize(
    "traces, problem",
    [('"profiles/worker0.111.pt.trace.json.gz"', '"traces" is'), ('["a.json", 3]', "traces: an item is 3")],
)
def test_a_malformed_list_is_one_line_naming_the_file(program, traces, problem):
    root, first, _ = program
    bad = root / "out" / "kernel_annotations_rank0_111.json"
    document = json.loads(bad.read_text())
    bad.write_text(json.dumps({**document, "traces": json.loads(traces)}))
    for args in (["out"], [first, "-a", "out"]):
        line = assert_clean_failure(run_cli("annotate", *args, cwd=root))
        assert line.startswith(f"cgfast: error: out/kernel_annotations_rank0_111.json: {problem}")
    assert not output_of(first).exists()


def test_a_file_that_cannot_be_read_lists_nothing_and_fails_only_its_ranks_traces(program):
    root, first, second = program
    (root / "out" / "kernel_annotations_rank5_1.json").write_text('{"5": [')  # truncated
    run = run_cli("annotate", "out", "--json", cwd=root)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["annotated_traces"] == 2
    ranked = root / "out" / "000005.1.pt.trace.json.gz"
    shutil.copyfile(TRACE, ranked)
    run = run_cli("annotate", "out", cwd=root)
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        "cgfast: failed: out/000005.1.pt.trace.json.gz: out/kernel_annotations_rank5_1.json: not valid JSON: "
        "expected more input (the document is truncated) at byte 7",
        "cgfast: error: 1 of 3 traces failed",
    ]
    check_annotated_by_their_own_process(first, second)
