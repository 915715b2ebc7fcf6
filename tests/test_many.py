"""`cgfast annotate` of many traces: directories, patterns, threads, failures."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest

from trace_files import cgfast, training_job, write_trace

pytest.importorskip("cgfast._cgfast")


def output_of(trace):
    return trace.with_name(trace.name.replace(".json.gz", ".annotated.json.gz"))


def inflated(path):
    return gzip.decompress(path.read_bytes())


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A pristine training job's traces; each test works on a copy."""
    root = tmp_path_factory.mktemp("job")
    training_job(root)
    return root


@pytest.fixture
def work(job, tmp_path):
    shutil.copytree(job / "traces", tmp_path / "traces")
    return tmp_path


def traces_in(root):
    return sorted(p for p in (root / "traces").rglob("*.pt.trace.json.gz"))


def test_a_directory_annotates_every_trace_with_its_ranks_annotations(work):
    run = cgfast("annotate", "traces", "-j", "2", "--json", cwd=work)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert (report["traces"], report["annotated_traces"], report["failed"], report["jobs"]) == (4, 4, [], 2)
    for trace in traces_in(work):
        assert output_of(trace).exists()
    by_input = {r["input"]: r for r in report["reports"]}
    assert (
        by_input["traces/step_2/000001.7.pt.trace.json.gz"]["annotations"]
        == "traces/kernel_annotations_rank1_1.json"
    )
    assert all(r["annotated"] > 0 for r in report["reports"])
    assert report["files_per_s"] > 0 and report["mb_per_s"] > 0
    # A second run finds the same traces, not the outputs of the first.
    again = cgfast("annotate", "traces", "--json", cwd=work)
    assert json.loads(again.stdout)["traces"] == 4


def test_each_output_is_what_annotating_that_trace_alone_writes(work, tmp_path_factory):
    assert cgfast("annotate", "traces", "-j", "2", cwd=work).returncode == 0
    alone = tmp_path_factory.mktemp("alone")
    for trace in traces_in(work):
        out = alone / "out.json.gz"
        run = cgfast("annotate", trace, "-o", out)
        assert run.returncode == 0, run.stderr
        assert run.stdout.startswith(f"cgfast annotate {trace}\n"), "one trace: the report as before"
        assert inflated(out) == inflated(output_of(trace))


def test_one_thread_and_two_write_the_same(work, tmp_path):
    assert cgfast("annotate", "traces", "-j", "1", cwd=work).returncode == 0
    first = {t: inflated(output_of(t)) for t in traces_in(work)}
    assert cgfast("annotate", "traces", "-j", "2", cwd=work).returncode == 0
    assert first == {t: inflated(output_of(t)) for t in traces_in(work)}


def test_patterns_and_several_paths(work):
    run = cgfast("annotate", "traces/step_1/*", "--json", cwd=work)
    assert run.returncode == 0, run.stderr
    assert [r["input"] for r in json.loads(run.stdout)["reports"]] == [
        "traces/step_1/000000.7.pt.trace.json.gz",
        "traces/step_1/000001.7.pt.trace.json.gz",
    ]
    # The pattern matched the outputs just written too: they are left out.
    again = json.loads(cgfast("annotate", "traces/**/*.gz", "--json", cwd=work).stdout)
    assert again["traces"] == 4
    both = cgfast("annotate", "traces/step_1", "traces/step_2/000000.7.pt.trace.json.gz", "--json", cwd=work)
    assert json.loads(both.stdout)["traces"] == 3


def test_a_failure_does_not_stop_the_others(work):
    step = work / "traces" / "step_2"
    (step / "000000.9.pt.trace.json").write_text('{"traceEvents": [{"ph": "X",')  # truncated
    write_trace(step / "000007.1.pt.trace.json", [])  # rank 7 has no annotations
    run = cgfast("annotate", "traces", "-j", "2", cwd=work)
    assert run.returncode == 1
    assert run.stdout.startswith("cgfast annotate: 6 traces, 4 annotated, 2 failed\n")
    failures = [line for line in run.stderr.splitlines() if line.startswith("cgfast: failed: ")]
    assert len(failures) == 2
    assert "000000.9.pt.trace.json: the trace is truncated" in failures[0]
    assert (
        failures[1].count("000007.1.pt.trace.json") == 1 and "could not find the annotations" in failures[1]
    )
    assert run.stderr.splitlines()[-1] == "cgfast: error: 2 of 6 traces failed"
    assert "Traceback" not in run.stderr and "panic" not in run.stderr
    for trace in traces_in(work):
        assert output_of(trace).exists()
    assert not (step / "000000.9.pt.trace.annotated.json").exists()


def test_explicit_annotations_serve_every_trace(work):
    write_trace(work / "traces" / "step_1" / "000009.1.pt.trace.json", [])
    run = cgfast("annotate", "traces", "-a", "traces/kernel_annotations_rank0_1.json", "--json", cwd=work)
    assert run.returncode == 0, run.stderr
    assert {r["annotations"] for r in json.loads(run.stdout)["reports"]} == {
        "traces/kernel_annotations_rank0_1.json"
    }


def test_verbose_lists_every_trace(work):
    run = cgfast("annotate", "traces", "-v", "-j", "1", cwd=work)
    assert run.returncode == 0, run.stderr
    assert sum(line.startswith("  ok      traces/") for line in run.stdout.splitlines()) == 4


@pytest.mark.parametrize(
    "args, message",
    [
        (["traces", "-o", "out.json"], "-o/--output names the output of one trace"),
        (["empty"], "no traces (*.trace.json or *.trace.json.gz) under empty"),
        (["traces/nothing*.json"], "no traces (*.trace.json or *.trace.json.gz) match traces/nothing*.json"),
        (["traces", "-j", "0"], "invalid value '0'"),
        (["traces", "-a", "missing.json"], "missing.json"),
    ],
)
def test_bad_requests(work, args, message):
    (work / "empty").mkdir()
    run = cgfast("annotate", *args, cwd=work)
    assert run.returncode != 0
    assert message in run.stderr
    assert "Traceback" not in run.stderr and "panic" not in run.stderr
