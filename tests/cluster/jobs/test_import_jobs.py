"""``import_jobs``: the generic jobs CSV (DESIGN.md §3) through the set-based writer, and that writer
against ``job_upsert`` one job at a time."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO

import pytest
import time_machine
from django.core.management import CommandError, call_command

from cluster.jobs.imports.jobs_csv import read_jobs_csv
from cluster.jobs.imports.shared import JobImportReport, Lookups
from cluster.jobs.services import JobInput, Outcome, job_upsert
from cluster.models import Allocation, AllocationOrigin, Gpu, Job
from core.units import WHOLE_GPU_SHARE

HEADER = (
    "job_id,user,team,project,gpu_count,gpu_model,submit_time,start_time,end_time,state,"
    "node,gpu_indices,priority,estimated_card_hours,name,account,partition,data_ready\n"
)
GOOD = HEADER + (
    'j1,ann,alpha,alpha-pre,2,H200,2026-11-02T07:00:00Z,2026-11-02T08:00:00+00:00,2026-11-02T10:00:00+00:00,completed,h200-a,"0,1",10,4.5,train-7b,acct-a,gpu,true\n'
    "j2,bob,beta,,0.5,NVIDIA L40S,1793602800,1793606400,,running,,,,,,,,\n"
    "j3,cat,alpha,,4,h200,2026-11-02T09:00:00+08:00,,,pending,,,,,,,,false\n"
    "j4,dan,beta,beta-vision,1,,2026-11-02T00:00:00Z,2026-11-02T01:00:00Z,2026-11-02T02:30:00Z,FAILED,l40s-a,1,,,,,,\n"
)
H = 3600


def at(hour, minute=0):
    return datetime(2026, 11, 2, hour, minute, tzinfo=UTC)


IMPORTED_AT = at(12)  # the clock of every import below: the same day, after the files' runs


@pytest.fixture(autouse=True)
def frozen_clock():
    """Job times are held to a day ahead of the application's clock: every test here, not only the
    commands, runs at the import's moment, whatever the real date."""
    with time_machine.travel(IMPORTED_AT, tick=False):
        yield


def run(tmp_path, text, *args, name="jobs.csv"):
    path = tmp_path / name
    path.write_text(text)
    out, err = StringIO(), StringIO()
    with time_machine.travel(IMPORTED_AT, tick=False):  # an import accounts what it touched up to now
        call_command("import_jobs", str(path), *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def job_rows():
    """Every stored fact of every job and allocation, ids and bookkeeping times left out."""
    jobs = list(Job.objects.order_by("source", "external_id", "start_time").values_list(
        "source", "external_id", "start_time", "name", "user", "team", "project", "account", "partition", "priority",
        "gpu_count", "gpu_model", "estimated_card_hours", "data_ready", "state", "submit_time", "end_time", "node_list",
    ))
    allocations = list(Allocation.objects.order_by(
        "job__source", "job__external_id", "job__start_time", "gpu", "gpu_model", "share", "start"
    ).values_list("job__external_id", "job__start_time", "gpu", "gpu_model", "share", "start", "end", "origin"))
    return jobs, allocations


@pytest.fixture
def cast(team_a, team_b, small_cluster):
    return {"a": team_a, "b": team_b, **small_cluster}


def test_it_imports_every_field_of_a_placed_job(tmp_path, cast):
    out, err = run(tmp_path, GOOD)
    assert err == ""
    assert "rows read 4, imported 4, updated 0, unchanged 0, skipped 0, rejected 0" in out
    job = Job.objects.get(external_id="j1")
    assert (job.source, job.user, job.team, job.project.slug, job.gpu_count, job.gpu_model, job.state) == (
        "csv", "ann", cast["a"], "alpha-pre", Decimal("2.000"), cast["h200"], "completed"
    )
    assert (job.submit_time, job.start_time, job.end_time) == (at(7), at(8), at(10))
    assert (job.priority, job.estimated_card_hours, job.name, job.account, job.partition, job.data_ready) == (
        10, Decimal("4.500"), "train-7b", "acct-a", "gpu", True
    )
    assert job.node_list == "h200-a"
    placed = list(job.allocations.order_by("gpu__index").values_list("gpu__uuid", "gpu_model", "share", "start", "end"))
    assert placed == [
        ("GPU-h200-a-0", None, WHOLE_GPU_SHARE, at(8), at(10)), ("GPU-h200-a-1", None, WHOLE_GPU_SHARE, at(8), at(10)),
    ]


def test_it_takes_a_placed_jobs_model_from_its_gpus(tmp_path, cast):
    run(tmp_path, GOOD)
    job = Job.objects.get(external_id="j4")
    assert (job.gpu_model, job.state, job.project.slug) == (cast["l40s"], "failed", "beta-vision")
    assert list(job.allocations.values_list("gpu__uuid", "share")) == [("GPU-l40s-a-1", WHOLE_GPU_SHARE)]


def test_it_keeps_a_fractional_running_job_unplaced_with_its_share(tmp_path, cast):
    run(tmp_path, GOOD)
    job = Job.objects.get(external_id="j2")
    assert (job.gpu_count, job.gpu_model, job.start_time, job.end_time, job.state) == (
        Decimal("0.500"), cast["l40s"], at(8), None, "running"
    )
    allocation = job.allocations.get()
    assert (allocation.unplaced, allocation.gpu_model, allocation.share, allocation.start, allocation.end) == (
        True, cast["l40s"], WHOLE_GPU_SHARE // 2, at(8), None
    )


def test_it_keeps_a_job_on_a_node_without_indices_unplaced(tmp_path, cast):
    run(tmp_path, HEADER + "n1,ann,alpha,,2,,,2026-11-02T08:00:00Z,,running,l40s-a,,,,,,,\n")
    job = Job.objects.get(external_id="n1")
    assert (job.node_list, job.gpu_model) == ("l40s-a", cast["l40s"])
    assert list(job.allocations.values_list("gpu", "gpu_model", "share")) == [(None, cast["l40s"].pk, 2 * WHOLE_GPU_SHARE)]


def test_it_stores_a_never_started_job_without_allocations(tmp_path, cast):
    run(tmp_path, GOOD)
    job = Job.objects.get(external_id="j3")
    assert (job.start_time, job.end_time, job.submit_time, job.data_ready) == (None, None, at(1), False)
    assert not job.allocations.exists()


def test_it_changes_nothing_when_the_same_file_is_imported_twice(tmp_path, cast):
    run(tmp_path, GOOD)
    before = list(Job.objects.order_by("id").values()), list(Allocation.objects.order_by("id").values())
    out, _err = run(tmp_path, GOOD)
    assert "rows read 4, imported 0, updated 0, unchanged 4, skipped 0, rejected 0" in out
    assert (list(Job.objects.order_by("id").values()), list(Allocation.objects.order_by("id").values())) == before


def test_it_updates_a_run_that_ended_and_a_job_moved_to_other_gpus(tmp_path, cast):
    run(tmp_path, GOOD)
    ended = GOOD.replace("1793606400,,running", "1793606400,1793613600,completed").replace('h200-a,"0,1"', "h200-b,0-1")
    out, _err = run(tmp_path, ended)
    assert "imported 0, updated 2, unchanged 2" in out
    assert Job.objects.get(external_id="j2").allocations.get().end == at(10)
    assert set(Job.objects.get(external_id="j1").allocations.values_list("gpu__uuid", flat=True)) == {
        "GPU-h200-b-0", "GPU-h200-b-1",
    }


def test_it_moves_only_scheduler_allocations(tmp_path, cast):
    run(tmp_path, GOOD)
    job = Job.objects.get(external_id="j1")
    observed = Allocation.objects.create(job=job, gpu=Gpu.objects.get(uuid="GPU-h200-b-0"), share=WHOLE_GPU_SHARE,
                                         start=at(8), end=at(9), origin=AllocationOrigin.OBSERVED)
    run(tmp_path, GOOD.replace('h200-a,"0,1"', "h200-a,0 1").replace(",2,H200,", ",1,H200,").replace("0 1", "1"))
    assert list(job.allocations.order_by("origin").values_list("gpu__uuid", "origin")) == [
        ("GPU-h200-b-0", "observed"), ("GPU-h200-a-1", "scheduler"),
    ]
    assert Allocation.objects.filter(pk=observed.pk).exists()


def test_it_keeps_each_run_of_a_requeued_job(tmp_path, cast):
    text = HEADER + (
        "r1,ann,alpha,,1,H200,2026-11-02T07:00:00Z,2026-11-02T08:00:00Z,2026-11-02T09:00:00Z,requeued,,,,,,,,\n"
        "r1,ann,alpha,,1,H200,2026-11-02T07:00:00Z,2026-11-02T09:30:00Z,,running,,,,,,,,\n"
    )
    run(tmp_path, text)
    runs = Job.objects.filter(external_id="r1").order_by("start_time")
    assert [(j.start_time, j.state) for j in runs] == [(at(8), "requeued"), (at(9, 30), "running")]


def test_it_lets_the_later_row_of_one_run_win(tmp_path, cast):
    text = GOOD + GOOD.splitlines(keepends=True)[2].replace(",running,", ",cancelled,").replace("1793606400,,", "1793606400,1793610000,")
    out, _err = run(tmp_path, text)
    assert "rows read 5, imported 4, updated 0, unchanged 0, skipped 1, rejected 0" in out
    assert "same run again later in the file 1" in out
    assert Job.objects.get(external_id="j2").state == "cancelled"


def test_it_imports_under_another_source(tmp_path, cast):
    run(tmp_path, GOOD, "--source", "slurm")
    assert set(Job.objects.values_list("source", flat=True)) == {"slurm"}


BAD_ROWS = {
    7: "x1,ann,gamma,,1,H200,,,,pending,,,,,,,,",
    8: "x2,ann,alpha,nope,1,H200,,,,pending,,,,,,,,",
    9: "x3,ann,alpha,,1,H200,,2026-11-02T08:00:00,,running,,,,,,,,",
    10: "x4,ann,alpha,,1,H200,,yesterday,,running,,,,,,,,",
    11: "x5,ann,alpha,,-1,H200,,,,pending,,,,,,,,",
    12: "x6,ann,alpha,,1,H200,,2026-11-02T08:00:00Z,2026-11-02T07:00:00Z,completed,,,,,,,,",
    13: "x7,ann,alpha,,1,H200,,2026-11-02T08:00:00Z,,completed,,,,,,,,",
    14: "x8,ann,alpha,,1,H200,,2026-11-02T08:00:00Z,,running,gpu-99,0,,,,,,",
    15: "x9,ann,alpha,,1,H200,,2026-11-02T08:00:00Z,,running,h200-a,7,,,,,,",
    16: "x10,ann,alpha,,2,H200,,2026-11-02T08:00:00Z,,running,h200-a,0,,,,,,",
    17: "x11,ann,alpha,,0.5,H200,,2026-11-02T08:00:00Z,,running,h200-a,0,,,,,,",
    18: "x12,ann,alpha,,1,B300,,,,pending,,,,,,,,",
    19: "x13,ann,alpha,,1,H200,,,,sleeping,,,,,,,,",
    20: "x14,ann,alpha,,1,L40S,,2026-11-02T08:00:00Z,,running,h200-a,0,,,,,,",
    21: "x15,ann,alpha,,1.0001,H200,,,,pending,,,,,,,,",
    22: ",ann,alpha,,1,H200,,,,pending,,,,,,,,",
    23: "x17,ann,alpha,,1,H200,,,,pending,,0,,,,,,",
    24: "x18,ann,alpha,,1,H200,,,,pending,,,high,,,,,",
    25: "x19,ann,alpha,,1,H200,,,,pending,,,,,,,,maybe",
}
REASONS = {
    7: "team: no team with slug 'gamma'",
    8: "project: team alpha has no project with slug 'nope'",
    9: "start_time: '2026-11-02T08:00:00' needs a UTC offset",
    10: "start_time: 'yesterday' is not ISO-8601 or epoch seconds",
    11: "gpu_count: must not be negative",
    12: "end_time: is before start_time",
    13: "end_time: a completed run that started needs an end time",
    14: "node: no node 'gpu-99'",
    15: "gpu_indices: node h200-a has no GPU 7",
    16: "gpu_indices: 1 GPU(s) named for gpu_count 2",
    17: "gpu_indices: a fractional gpu_count (0.5) cannot be placed on whole GPUs; leave node and gpu_indices empty",
    19: "state: 'sleeping' is not one of pending, running",
    20: "gpu_model: L40S, but node h200-a's GPUs 0 are H200",
    21: "gpu_count: has at most 3 decimals",
    22: "job_id: is required",
    23: "gpu_indices: needs a node",
    24: "priority: 'high' is not a whole number",
    25: "data_ready: 'maybe' is not true or false",
}
BAD = GOOD + "\n" + "\n".join(BAD_ROWS.values()) + "\n"  # a blank line 6: not a row


def test_it_reports_bad_rows_by_line_and_keeps_the_good(tmp_path, cast):
    out, err = run(tmp_path, BAD)
    for line, reason in REASONS.items():
        assert f"line {line}: {reason}" in err, (line, err)
    assert len(err.splitlines()) == len(REASONS)
    # Line 18 names an unknown GPU model: the row is kept and the model created (issue 12).
    assert f"rows read {4 + len(BAD_ROWS)}, imported 5, updated 0, unchanged 0, skipped 0, rejected {len(REASONS)}" in out
    assert "GPU models created" in out and "B300" in out
    assert Job.objects.count() == 5


def test_it_rejects_the_whole_file_with_strict(tmp_path, cast):
    with pytest.raises(CommandError, match=f"--strict: {len(REASONS)} bad row\\(s\\), nothing imported: line 7: team"):
        run(tmp_path, BAD, "--strict")
    assert not Job.objects.exists()


def test_it_names_missing_columns(tmp_path, cast):
    with pytest.raises(CommandError, match="lacks the required column\\(s\\) gpu_model, state"):
        run(tmp_path, "job_id,user,team,project,gpu_count,submit_time,start_time,end_time\n")


def test_it_counts_lines_across_a_quoted_newline(tmp_path, cast):
    text = HEADER + '"q1",ann,alpha,,1,H200,,,,pending,,,,,"two\nlines",,,\nq2,ann,alpha,,1,H200,,,,asleep,,,,,,,,\n'
    _out, err = run(tmp_path, text)
    assert "line 4: state: 'asleep'" in err
    assert Job.objects.get(external_id="q1").name == "two\nlines"


def parsed(path):
    report = JobImportReport()
    return list(read_jobs_csv(path, source="csv", lookups=Lookups(), report=report))


def test_it_writes_the_same_rows_as_job_upsert_one_by_one(tmp_path, cast):
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    first.write_text(GOOD)
    # Then: j1 ends early on other GPUs, j2 ends, j4 loses its placement, j5 is new, and j2 appears twice.
    second.write_text(
        GOOD.replace('2026-11-02T10:00:00+00:00,completed,h200-a,"0,1"', "2026-11-02T09:00:00Z,failed,h200-b,0-1")
        .replace("1793606400,,running", "1793606400,1793613600,completed").replace("FAILED,l40s-a,1", "failed,,")
        + "j5,eve,alpha,alpha-pre,0.25,H200,,2026-11-02T11:00:00Z,,running,,,,,,,,\n"
        + "j2,bob,beta,,0.5,NVIDIA L40S,1793602800,1793606400,1793617200,completed,,,,,,,,\n"
    )
    run(tmp_path, first.read_text(), name="a.csv")
    run(tmp_path, second.read_text(), name="b.csv")
    imported = job_rows()
    Job.objects.all().delete()
    outcomes = [job_upsert(data)[1] for path in (first, second) for _line, data in parsed(path)]
    assert outcomes.count(Outcome.CREATED) == 5
    assert job_rows() == imported
    assert len(imported[1]) == 5  # j1 on two GPUs; j2, j4 and j5 unplaced; j3 never started


def test_it_lets_a_started_row_adopt_the_runs_pending_row(tmp_path, cast):
    run(tmp_path, GOOD)  # j3 is pending, never started
    pending = Job.objects.get(external_id="j3")
    started = GOOD.replace("2026-11-02T09:00:00+08:00,,,pending", "2026-11-02T09:00:00+08:00,2026-11-02T03:00:00Z,,running")
    out, _err = run(tmp_path, started)
    assert "imported 0, updated 1, unchanged 3" in out
    job = Job.objects.get(external_id="j3")
    assert (job.pk, job.start_time, job.state, job.allocations.get().start) == (pending.pk, at(3), "running", at(3))


def test_it_lets_a_started_row_adopt_a_pending_row_earlier_in_the_file(tmp_path, cast):
    text = HEADER + (
        "p1,ann,alpha,,1,H200,2026-11-02T01:00:00Z,,,pending,,,,,,,,\n"
        "p1,ann,alpha,,1,H200,2026-11-02T01:00:00Z,2026-11-02T02:00:00Z,,running,,,,,,,,\n"
    )
    out, _err = run(tmp_path, text)
    assert "imported 1, updated 0, unchanged 0, skipped 1" in out
    assert list(Job.objects.values_list("start_time", "state")) == [(at(2), "running")]


def snapshot():
    jobs = list(Job.objects.order_by("external_id", "start_time").values_list(
        "external_id", "start_time", "state", "end_time", "gpu_count", "gpu_model", "user"))
    allocations = list(Allocation.objects.order_by("job__external_id", "job__start_time", "gpu", "share").values_list(
        "job__external_id", "job__start_time", "gpu", "gpu_model", "share", "start", "end", "origin"))
    return jobs, allocations


def test_it_leaves_the_rows_job_upsert_leaves_for_any_order_of_reports(cast):
    """Random report sequences over two jobs (pending, started, requeued, placed, unplaced, repeated),
    after random stored history: jobs_write leaves what job_upsert one by one leaves."""
    import random

    from cluster.jobs.write import jobs_write

    gpus = list(Gpu.objects.filter(node__hostname="h200-a").order_by("index"))
    starts = [None, at(1), at(2)]

    def report(rng):
        start = rng.choice(starts)
        state = "pending" if start is None and rng.random() < 0.7 else rng.choice(["running", "completed", "cancelled"])
        placed = start is not None and rng.random() < 0.4
        return JobInput(
            source="slurm", external_id=rng.choice(["a", "b"]), start_time=start, team=cast["a"], state=state,
            end_time=start + timedelta(hours=1) if start and state in ("completed", "cancelled") else None,
            gpu_count=Decimal(2 if placed else rng.choice(["0", "1", "0.5"])), gpus=gpus if placed else None,
            gpu_model=cast["h200"], user=rng.choice(["ann", "bob"]),
        )

    for seed in range(40):
        rng = random.Random(seed)
        stored, reports = [report(rng) for _ in range(rng.randrange(4))], [report(rng) for _ in range(rng.randrange(1, 7))]
        results = []
        for write in (lambda batch: jobs_write(batch), lambda batch: [job_upsert(data) for data in batch]):
            Job.objects.all().delete()
            for data in stored:
                job_upsert(data)
            write(reports)
            results.append(snapshot())
        assert results[0] == results[1], seed


def test_it_benchmarks_and_leaves_no_jobs_behind(db):
    from bench.jobs import bench_import_jobs

    result = bench_import_jobs(200)
    assert result["jobs"] == 200 and result["first_rows_per_s"] > 0
    assert not Job.objects.exists() and not Allocation.objects.exists()


READY_HEADER = "job_id,user,team,project,gpu_count,gpu_model,submit_time,start_time,end_time,state,data_ready_at\n"


def test_it_reads_the_data_ready_time_which_may_lie_ahead(tmp_path, cast):
    """Issue 19: the optional ``data_ready_at`` column, as the times are written; unlike the job's own times
    it may lie weeks ahead of the import's clock (data still being copied); empty: unknown."""
    out, err = run(tmp_path, READY_HEADER + (
        "r1,ann,alpha,,1,H200,2026-11-02T07:00:00Z,,,pending,2026-11-02T11:30:00+08:00\n"
        "r2,ann,alpha,,1,H200,2026-11-02T07:00:00Z,,,pending,1795000000\n"
        "r3,ann,alpha,,1,H200,2026-11-02T07:00:00Z,,,pending,\n"
    ))
    assert err == "" and "imported 3" in out
    ready = dict(Job.objects.values_list("external_id", "data_ready_at"))
    assert ready == {"r1": at(3, 30), "r2": datetime.fromtimestamp(1795000000, UTC), "r3": None}
    assert ready["r2"] - IMPORTED_AT > timedelta(days=14)


@pytest.mark.parametrize(
    ("cell", "reason"),
    [
        ("tomorrow", "data_ready_at: 'tomorrow' is not ISO-8601 or epoch seconds"),
        ("2026-11-03T08:00:00", "data_ready_at: '2026-11-03T08:00:00' needs a UTC offset"),
        ("2150-01-01T00:00:00Z", "data_ready_at: 2150-01-01T00:00:00+00:00 is outside the supported window"),
    ],
)
def test_a_bad_data_ready_time_is_a_line_error_naming_the_column(tmp_path, cast, cell, reason):
    out, err = run(tmp_path, READY_HEADER + (
        "ok,ann,alpha,,1,H200,2026-11-02T07:00:00Z,,,pending,\n"
        f"bad,ann,alpha,,1,H200,2026-11-02T07:00:00Z,,,pending,{cell}\n"
    ))
    assert f"line 3: {reason}" in err, err
    assert "imported 1" in out and "rejected 1" in out
    assert list(Job.objects.values_list("external_id", flat=True)) == ["ok"]
