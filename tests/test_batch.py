"""`cgfast.batch.annotate_many` on a Dask cluster started here."""

from __future__ import annotations

import gzip
import shutil

import pytest

from trace_files import cgfast, training_job

pytest.importorskip("cgfast._cgfast")
distributed = pytest.importorskip(
    "distributed", reason="the dask extra (pip install 'cgfast[dask]') is not installed"
)

from cgfast.batch import BatchError, annotate_many  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0"
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("job")
    training_job(root)
    return root


@pytest.fixture
def work(job, tmp_path):
    shutil.copytree(job / "traces", tmp_path / "traces")
    return tmp_path / "traces"


def outputs(traces):
    return {
        p.relative_to(traces): gzip.decompress(p.read_bytes())
        for p in sorted(traces.rglob("*.annotated.json.gz"))
    }


def test_every_trace_is_annotated_on_the_cluster(client, work):
    with distributed.get_task_stream(client) as tasks:
        reports = annotate_many(work, engine=client)
    assert sorted(str(t["key"]).split(" ", 1)[1] for t in tasks.data) == [r["input"] for r in reports]
    assert [r["input"] for r in reports] == [str(p) for p in sorted(work.rglob("*.pt.trace.json.gz"))]
    assert all(r["ok"] for r in reports), reports
    assert all(r["report"]["annotated"] > 0 for r in reports)
    assert reports[1]["report"]["annotations"].endswith("kernel_annotations_rank1_1.json")
    on_cluster = outputs(work)
    assert len(on_cluster) == 4
    # The same files as the command line writes.
    assert cgfast("annotate", work).returncode == 0
    assert outputs(work) == on_cluster


def test_failures_are_reported_not_raised(client, work):
    (work / "step_1" / "000000.9.pt.trace.json").write_text("{")
    reports = annotate_many([work / "step_1"], engine=client, gzip_level=1)
    assert [r["ok"] for r in reports] == [True, False, True]
    assert "000000.9.pt.trace.json: the trace is truncated" in reports[1]["error"]
    with pytest.raises(BatchError, match="1 of 3 traces failed") as failed:
        annotate_many(str(work / "step_1"), engine=client, raise_on_failure=True)
    assert len(failed.value.reports) == 3


def test_options_reach_the_workers(client, work):
    reports = annotate_many(
        f"{work}/step_2/*.gz",
        engine=client,
        annotations=work / "kernel_annotations_rank0_1.json",
        recover="never",
    )
    assert [r["report"]["annotations"] for r in reports] == [
        str(work / "kernel_annotations_rank0_1.json")
    ] * 2
    with pytest.raises(TypeError, match="output"):
        annotate_many(work, engine=client, output="x.json")


def test_the_current_client_or_threads_when_there_is_none(client, work, monkeypatch):
    from cgfast import batch

    used = []
    on_cluster = batch._on_cluster
    monkeypatch.setattr(
        batch, "_on_cluster", lambda c, traces, options: used.append(c) or on_cluster(c, traces, options)
    )
    assert all(r["ok"] for r in annotate_many(work))
    assert used == [client], "the client of this process"
    monkeypatch.setattr(batch, "_current_client", lambda: None)
    (work / "step_2" / "000000.9.pt.trace.json").write_text("[]")
    reports = annotate_many(work)
    assert used == [client], "threads of this process"
    assert [r["ok"] for r in reports] == [True, True, True, False, True]
    assert "expected a JSON object" in reports[3]["error"]
