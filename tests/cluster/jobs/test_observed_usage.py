"""Observed usage (cluster/jobs/observed/): processes the agents saw become allocations of known jobs, or
observed jobs attributed by their unix user's team."""

import json
import threading
from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.conf import settings
from django.db import connection, transaction

from agents.backends.sim import SimBackend
from agents.backends.sim_workloads import USERS as SIM_USERS
from cluster.jobs.observed.ranges import merge_ranges, split_by_runs
from cluster.jobs.observed.scan import LOCK_NAME, counted_allocations, observed_scan
from cluster.jobs.services import JobInput, job_upsert
from cluster.models import (
    Allocation,
    AllocationOrigin,
    Gpu,
    IdentityKind,
    Job,
    JobSource,
    JobState,
    Node,
    TeamIdentity,
)
from cluster.telemetry.ingest import ingest_json_lines
from config.celery import app as celery_app
from core.locks import advisory_lock
from core.units import WHOLE_GPU_SHARE, share_from_fraction
from demo.cluster import UNIX_USERS, load_demo
from tests.conftest import T0

pytestmark = pytest.mark.django_db

EPOCH0 = int(T0.timestamp())
GAP = timedelta(seconds=30)


def at(seconds: int):
    return T0 + timedelta(seconds=seconds)


def proc(user="alice", job_ref=None, *, pid=4100, gi_id=None, ci_id=None) -> dict:
    return {"pid": pid, "user": user, "used_mib": 20_000, "job_ref": job_ref, "gi_id": gi_id, "ci_id": ci_id}


def records(uuid: str, start_s: int, end_s: int, processes: list | None, *, interval_s: int = 10) -> list[dict]:
    """Agent records for the intervals ending at start_s + interval_s … end_s (seconds after T0)."""
    return [
        {"ts": EPOCH0 + ts, "gpu_uuid": uuid, "interval_s": interval_s, "util_gpu": 50.0, "processes": processes or []}
        for ts in range(start_s + interval_s, end_s + 1, interval_s)
    ]


def store(rows: list[dict]) -> None:
    blob = b"\n".join(json.dumps(row).encode() for row in rows)
    with transaction.atomic():
        result = ingest_json_lines(
            blob, node_id=None, now=at(86_400), max_future_s=600, max_age_s=30 * 86_400, need_seq=False
        )
    assert result.stored == len(rows), result.rejected


def snapshot() -> tuple:
    """Every job and allocation row, all columns (timestamps included)."""
    return (
        list(Job.objects.order_by("pk").values()),
        list(Allocation.objects.order_by("pk").values()),
    )


def observed_jobs():
    return Job.objects.filter(source=JobSource.OBSERVED).order_by("start_time", "external_id")


def slurm_job(external_id: str, start, end, team, *, gpu_count=Decimal(1)) -> Job:
    job, _outcome = job_upsert(JobInput(
        source=JobSource.SLURM, external_id=external_id, start_time=start, end_time=end, team=team,
        gpu_count=gpu_count, state=JobState.RUNNING if end is None else JobState.COMPLETED,
    ))
    return job


@pytest.fixture
def gpu0(small_cluster):
    return Gpu.objects.get(uuid="GPU-h200-a-0")


@pytest.fixture
def gpu1(small_cluster):
    return Gpu.objects.get(uuid="GPU-h200-a-1")


# --- Known jobs ---------------------------------------------------------------------------------------


def test_it_attaches_a_slurm_job_to_the_gpu_over_its_run(gpu0, team_a):
    job = slurm_job("4242", at(60), at(540), team_a)
    # the process shows from the record covering 60..70 to the one covering 540..550 (a sample's slack)
    store(records(gpu0.uuid, 0, 60, None) + records(gpu0.uuid, 60, 550, [proc("alice", "job_4242")])
          + records(gpu0.uuid, 550, 600, None))

    observed_scan()

    allocation = Allocation.objects.get(origin=AllocationOrigin.OBSERVED)
    assert (allocation.job, allocation.gpu, allocation.share) == (job, gpu0, WHOLE_GPU_SHARE)
    assert (allocation.start, allocation.end) == (at(60), at(540))  # clipped to the scheduler's run
    assert not observed_jobs().exists()

    # the same id seen long after that run ended is not that run: an observed job of its own
    store(records(gpu0.uuid, 600, 700, [proc("alice", "job_4242")]))
    observed_scan()
    observed_scan()
    assert list(observed_jobs().values_list("external_id", "start_time")) == [("job_4242", at(600))]
    assert list(job.allocations.filter(origin="observed").values_list("start", "end")) == [(at(60), at(540))]
    # the job is counted once: by where it ran, not also by its unplaced scheduler allocation
    assert list(counted_allocations().filter(job=job)) == [allocation]
    assert job.allocations.filter(origin=AllocationOrigin.SCHEDULER, gpu__isnull=True).exists()


def test_it_attaches_an_array_task_and_a_kubernetes_pod(gpu0, gpu1, team_a):
    array_task = slurm_job("900_3", at(0), None, team_a)
    pod = job_upsert(JobInput(
        source=JobSource.KUBERNETES, external_id="0f6c1e9a-2b1d-4c4e-8f43-96d1b2a0c001", start_time=at(0),
        team=team_a, state=JobState.RUNNING,
    ))[0]
    store(records(gpu0.uuid, 0, 120, [proc("bob", "job_900")])
          + records(gpu1.uuid, 0, 120, [proc("root", "k8s-pod:0f6c1e9a-2b1d-4c4e-8f43-96d1b2a0c001")]))

    observed_scan()

    assert set(Allocation.objects.filter(origin=AllocationOrigin.OBSERVED).values_list("job", "gpu", "start", "end")) == {
        (array_task.pk, gpu0.pk, at(0), at(120)), (pod.pk, gpu1.pk, at(0), at(120)),
    }
    assert not observed_jobs().exists()


def test_it_attaches_a_mig_process_to_its_instance(small_cluster, gpu0, gpu1):
    slices = [
        Gpu.objects.create(
            node=gpu0.node, index=0, uuid=f"MIG-a-{slot}", model=gpu0.model, memory_mib=70_000, mig_parent=gpu0,
            mig_profile=profile, share=share_from_fraction(fraction),
        )
        for slot, (profile, fraction) in enumerate([("3g.71gb", "3/7"), ("4g.71gb", "4/7")])
    ]
    only = Gpu.objects.create(
        node=gpu1.node, index=1, uuid="MIG-b-0", model=gpu1.model, memory_mib=140_000, mig_parent=gpu1,
        mig_profile="7g.141gb", share=WHOLE_GPU_SHARE,
    )
    store(records(slices[1].uuid, 0, 300, [proc("bob", gi_id=1, ci_id=0)])
          + records(gpu0.uuid, 0, 300, None)
          # a process listed on the whole GPU's record but naming its only instance
          + records(gpu1.uuid, 0, 300, [proc("carol", gi_id=0, ci_id=0)]))

    observed_scan()

    on_slice = Allocation.objects.get(job__user="bob")
    assert (on_slice.gpu, on_slice.share) == (slices[1], share_from_fraction("4/7"))
    assert (on_slice.start, on_slice.end) == (at(0), at(300))
    assert Allocation.objects.get(job__user="carol").gpu == only


# --- Observed jobs ------------------------------------------------------------------------------------


def test_it_makes_observed_jobs_attributed_by_unix_user(gpu0, gpu1, team_a):
    project = team_a.projects.get()
    TeamIdentity.objects.create(kind=IdentityKind.UNIX_USER, name="alice", team=team_a, project=project)
    store(records(gpu0.uuid, 0, 600, [proc("alice")]) + records(gpu1.uuid, 0, 600, [proc("mallory", pid=9)]))

    observed_scan()

    alice, mallory = observed_jobs().order_by("user")
    assert (alice.external_id, alice.team, alice.project, alice.state) == ("h200-a/alice", team_a, project, "running")
    assert (alice.start_time, alice.end_time, alice.node_list, alice.gpu_count) == (at(0), None, "h200-a", 0)
    assert list(alice.allocations.values_list("gpu", "start", "end", "origin")) == [(gpu0.pk, at(0), at(600), "observed")]
    assert (mallory.external_id, mallory.team, mallory.project) == ("h200-a/mallory", None, None)

    TeamIdentity.objects.create(kind=IdentityKind.UNIX_USER, name="mallory", team=team_a)
    observed_scan()
    mallory.refresh_from_db()
    assert mallory.team == team_a  # a mapping added later attributes the jobs seen before it


def test_it_makes_one_observed_job_of_an_unknown_job_on_several_gpus_and_nodes(small_cluster, gpu0, gpu1):
    other = Gpu.objects.get(uuid="GPU-h200-b-0")
    store(records(gpu0.uuid, 0, 300, [proc("dave", "job_777")]) + records(gpu1.uuid, 10, 300, [proc("dave", "job_777")])
          + records(other.uuid, 20, 300, [proc("dave", "job_777")]))

    observed_scan()

    job = Job.objects.get()
    assert (job.source, job.external_id, job.user, job.start_time) == ("observed", "job_777", "dave", at(0))
    assert job.node_list == "h200-a,h200-b"
    assert set(job.allocations.values_list("gpu", "start", "end")) == {
        (gpu0.pk, at(0), at(300)), (gpu1.pk, at(10), at(300)), (other.pk, at(20), at(300)),
    }


def test_it_extends_one_job_across_scans_and_completes_it_when_the_process_is_gone(gpu0):
    store(records(gpu0.uuid, 0, 300, [proc("alice")]))
    observed_scan()
    first = Job.objects.get()

    store(records(gpu0.uuid, 300, 600, [proc("alice")]))
    observed_scan()
    job = Job.objects.get()
    assert (job.pk, job.state, job.end_time) == (first.pk, "running", None)
    assert list(job.allocations.values_list("start", "end")) == [(at(0), at(600))]

    store(records(gpu0.uuid, 600, 620, None))  # within the gap: it may come back
    observed_scan()
    assert Job.objects.get().state == "running"

    store(records(gpu0.uuid, 620, 700, None))
    observed_scan()
    job = Job.objects.get()
    assert (job.pk, job.state, job.end_time) == (first.pk, "completed", at(600))
    assert Allocation.objects.count() == 1


def test_it_splits_presence_at_a_gap_longer_than_the_threshold(gpu0, gpu1, team_a):
    known = slurm_job("31", at(0), None, team_a)
    short_gap = records(gpu1.uuid, 0, 200, [proc("bob", "job_31")]) + records(gpu1.uuid, 220, 400, [proc("bob", "job_31")])
    long_gap = (records(gpu0.uuid, 0, 200, [proc("alice")]) + records(gpu0.uuid, 200, 300, None)
                + records(gpu0.uuid, 300, 400, [proc("alice")]))
    store(short_gap + long_gap)

    observed_scan()

    # two missed 10 s records (a 20 s hole) are within the 30 s gap: one range
    assert list(known.allocations.filter(origin="observed").values_list("start", "end")) == [(at(0), at(400))]
    # 100 s without the process: two runs, the first one over
    runs = list(observed_jobs().values_list("external_id", "start_time", "end_time", "state"))
    assert runs == [("h200-a/alice", at(0), at(200), "completed"), ("h200-a/alice", at(300), None, "running")]


def test_it_splits_a_known_jobs_presence_into_two_allocations(gpu0, team_a):
    job = slurm_job("32", at(0), at(1000), team_a)
    store(records(gpu0.uuid, 0, 200, [proc("bob", "job_32")]) + records(gpu0.uuid, 200, 500, None)
          + records(gpu0.uuid, 500, 600, [proc("bob", "job_32")]))

    observed_scan()

    assert list(job.allocations.filter(origin="observed").order_by("start").values_list("start", "end")) == [
        (at(0), at(200)), (at(500), at(600)),
    ]


def test_it_hands_an_observed_job_to_the_slurm_job_recorded_later(gpu0, team_a):
    store(records(gpu0.uuid, 0, 600, [proc("erin", "job_555")]))
    observed_scan()
    assert Job.objects.get().source == "observed"

    known = slurm_job("555", at(5), at(600), team_a)  # e.g. the nightly sacct import
    observed_scan()

    assert not observed_jobs().exists()
    assert list(known.allocations.filter(origin="observed").values_list("gpu", "start", "end")) == [
        (gpu0.pk, at(5), at(600)),
    ]
    rows = snapshot()
    observed_scan()
    assert snapshot() == rows


def test_it_merges_two_runs_when_late_records_bridge_them(gpu0):
    store(records(gpu0.uuid, 0, 100, [proc("frank")]) + records(gpu0.uuid, 200, 300, [proc("frank")]))
    observed_scan(start=at(-60))
    assert observed_jobs().count() == 2

    store(records(gpu0.uuid, 100, 200, [proc("frank")]))  # the agent's late records for the hole
    observed_scan(start=at(-60))

    job = Job.objects.get()
    assert (job.start_time, job.state) == (at(0), "running")
    assert list(job.allocations.values_list("start", "end")) == [(at(0), at(300))]


def test_it_keeps_a_run_whole_after_the_gap_setting_is_lowered(gpu0, gpu1, settings):
    settings.OBSERVED_GAP_S = 300
    store(records(gpu0.uuid, 0, 100, [proc("judy", "job_61")]) + records(gpu1.uuid, 250, 350, [proc("judy", "job_61")]))
    observed_scan(start=at(-60))
    job = Job.objects.get()

    settings.OBSERVED_GAP_S = 30
    store(records(gpu0.uuid, 100, 130, [proc("judy", "job_61")]))
    observed_scan(start=at(-60))

    assert list(Job.objects.values_list("pk", "start_time")) == [(job.pk, at(0))]
    assert sorted(job.allocations.values_list("gpu", "start", "end")) == [(gpu0.pk, at(0), at(130)), (gpu1.pk, at(250), at(350))]


# --- Rerunnable and concurrent ------------------------------------------------------------------------


def mixed_history(small_cluster, team_a):
    """Known, unknown and ref-less processes on three GPUs, with a gap and a finished job."""
    gpus = list(Gpu.objects.filter(node__hostname__in=["h200-a", "h200-b"]).order_by("uuid"))
    TeamIdentity.objects.create(kind=IdentityKind.UNIX_USER, name="alice", team=team_a)
    slurm_job("100", at(0), at(900), team_a, gpu_count=Decimal(2))
    rows = records(gpus[0].uuid, 0, 900, [proc("alice", "job_100"), proc("grace", pid=7)])
    rows += records(gpus[1].uuid, 0, 900, [proc("alice", "job_100")])
    rows += records(gpus[2].uuid, 0, 300, [proc("heidi", "container:" + "ab" * 32)])
    rows += records(gpus[2].uuid, 300, 400, None) + records(gpus[2].uuid, 400, 1200, [proc("alice")])
    rows += records(gpus[3].uuid, 0, 1200, [proc("ivan", "job_404")])
    rows += records(gpus[0].uuid, 900, 1200, None) + records(gpus[1].uuid, 900, 1200, None)
    store(rows)


def test_it_gives_the_same_rows_when_run_again(small_cluster, team_a):
    mixed_history(small_cluster, team_a)

    first = observed_scan()
    rows = snapshot()
    again = observed_scan()

    assert snapshot() == rows
    assert first["pieces"] and again["observed_jobs_written"] == again["known_allocations_written"] == 0
    assert again["observed_allocations_written"] == 0
    observed_scan(start=at(-3600))  # a full rescan of the window changes nothing either
    assert snapshot() == rows
    kinds = set(Job.objects.values_list("source", "external_id"))
    assert {("slurm", "100"), ("observed", "h200-a/grace"), ("observed", "container:" + "ab" * 32),
            ("observed", "h200-b/alice"), ("observed", "job_404")} <= kinds


def test_it_scans_the_rows_read_in_pieces_the_same_as_all_at_once(small_cluster, team_a):
    mixed_history(small_cluster, team_a)
    observed_scan()
    whole = outcome()
    Job.objects.filter(source="observed").delete()
    Allocation.objects.filter(origin="observed").delete()

    for end in range(100, 1300, 100):  # overlapping windows, oldest first
        observed_scan(start=at(end - 200), end=at(end))

    assert outcome() == whole


def outcome() -> tuple:
    """The jobs and observed allocations by content, whatever their ids."""
    jobs = sorted(Job.objects.values_list("source", "external_id", "user", "team", "start_time", "end_time", "state"))
    allocations = sorted(
        Allocation.objects.filter(origin="observed").values_list("job__external_id", "gpu", "share", "start", "end")
    )
    return jobs, allocations


@pytest.mark.django_db(transaction=True)
def test_it_gives_the_rows_of_one_run_when_two_run_at_once(small_cluster, team_a):
    mixed_history(small_cluster, team_a)
    barrier, results, errors = threading.Barrier(2), [], []

    def scan():
        try:
            barrier.wait()
            results.append(observed_scan())
        except BaseException as error:  # reported by the test thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=scan) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    rows = snapshot()
    assert rows[0] and rows[1]
    observed_scan()
    assert snapshot() == rows
    assert len(Job.objects.filter(source="observed", external_id="job_404")) == 1


@pytest.mark.django_db(transaction=True)
def test_it_does_nothing_while_another_scan_holds_the_lock(small_cluster, team_a):
    mixed_history(small_cluster, team_a)
    holding, release = threading.Event(), threading.Event()

    def other_scan():
        try:
            with advisory_lock(LOCK_NAME) as locked:
                assert locked
                holding.set()
                release.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=other_scan)
    thread.start()
    try:
        assert holding.wait(30)
        assert observed_scan() == {"skipped": True}
        assert not Allocation.objects.filter(origin="observed").exists()
    finally:
        release.set()
        thread.join(30)
    assert observed_scan()["pieces"]


def test_it_reads_odd_process_entries_without_failing(gpu0):
    odd = ["junk", 5, None, {"user": 42, "job_ref": 7, "gi_id": "x", "ci_id": 1e30},
           {"user": "u" * 300, "job_ref": "container:" + "f" * 300}, {"pid": 1}]
    store(records(gpu0.uuid, 0, 60, odd))

    observed_scan()

    assert sorted(observed_jobs().values_list("external_id", "user")) == [
        ("container:" + "f" * 190, "u" * 100), ("h200-a/-", ""), ("h200-a/42", "42"),
    ]


# --- Counting, pure rules, wiring ---------------------------------------------------------------------


def test_it_counts_each_job_once(gpu0, gpu1, team_a):
    only_unplaced = slurm_job("1", at(0), at(100), team_a)
    placed, _ = job_upsert(JobInput(
        source=JobSource.SLURM, external_id="2", start_time=at(0), end_time=at(100), team=team_a,
        gpu_count=Decimal(1), gpus=[gpu1], state=JobState.COMPLETED,
    ))
    store(records(gpu0.uuid, 0, 100, [proc("a", "job_2")]))
    observed_scan()

    counted = counted_allocations()
    assert list(counted.filter(job=only_unplaced).values_list("gpu", flat=True)) == [None]
    # the scheduler placed it: what it said counts, the observation is for information
    assert list(counted.filter(job=placed).values_list("gpu", "origin")) == [(gpu1.pk, "scheduler")]
    assert placed.allocations.filter(origin="observed", gpu=gpu0).exists()


def test_it_merges_ranges_and_splits_them_over_runs():
    ranges = [(at(50), at(60)), (at(0), at(10)), (at(41), at(45)), (at(5), at(8))]
    assert merge_ranges(ranges, GAP) == [(at(0), at(10)), (at(41), at(60))]  # 31 s apart: two; 5 s: one
    assert merge_ranges([(at(0), at(10)), (at(40), at(45))], GAP) == [(at(0), at(45))]  # exactly the gap: one
    matched, rest = split_by_runs((at(0), at(1000)), [(7, at(100), at(200)), (8, at(500), None)], GAP)
    assert matched == [(7, at(100), at(200)), (8, at(500), at(1000))]
    assert rest == [(at(0), at(70)), (at(230), at(470))]


def test_it_is_a_periodic_task():
    entry = settings.CELERY_BEAT_SCHEDULE["observed-usage"]
    assert entry["task"] == "cluster.tasks.observed_scan" and entry["options"]["expires"] <= entry["schedule"]
    celery_app.loader.import_default_modules()
    assert "cluster.tasks.observed_scan" in celery_app.tasks


# --- The demo -----------------------------------------------------------------------------------------


@time_machine.travel(at(3 * 3600), tick=False)  # an hour after the two hours of records below
def test_it_turns_the_demo_fleets_processes_into_jobs_with_teams():
    assert set(UNIX_USERS) == set(SIM_USERS)
    load_demo(history_days=0)  # the nodes, teams and users; no history (it would be dated by the clock)
    node = Node.objects.get(hostname="gpu-h100-01")
    sim = SimBackend(hostname=node.hostname, model="H100", mig=True)
    start = EPOCH0 - EPOCH0 % 10
    lines = [
        json.dumps(record).encode()
        for ts in range(start + 10, start + 2 * 3600 + 1, 10)
        for record in sim.sample(ts=ts, interval_s=10)
    ]
    with transaction.atomic():
        ingest_json_lines(b"\n".join(lines), node_id=node.pk, now=at(3 * 3600), max_future_s=600,
                          max_age_s=86_400, need_seq=False)

    observed_scan()

    jobs = observed_jobs()
    assert jobs.count() >= 5
    assert not jobs.filter(team__isnull=True).exists()
    assert jobs.filter(external_id__startswith="job_").exists()
    assert Allocation.objects.filter(origin="observed", gpu__mig_parent__isnull=False).exists()
    rows = snapshot()
    observed_scan()
    assert snapshot() == rows


def test_it_reads_each_node_from_where_the_last_scan_left_it(gpu0, settings):
    from cluster.models import ObservedScanState

    settings.OBSERVED_OVERLAP_S = 60
    store(records(gpu0.uuid, 0, 600, [proc("alice")]))
    observed_scan()
    state = ObservedScanState.objects.get(node=gpu0.node)
    assert state.scanned_to == at(600)
    # Records older than the watermark less the overlap (as after importing history) are left to an
    # explicit rescan; newer ones are read by the next scan.
    store(records(gpu0.uuid, 1000, 1200, [proc("bob")]) + records(gpu0.uuid, 600, 700, [proc("alice")]))
    store(records("GPU-h200-a-1", 0, 300, [proc("carol")]))  # the same node's other GPU
    observed_scan()
    users = set(observed_jobs().values_list("user", flat=True))
    assert users == {"alice", "bob"}  # carol's records end at 300 s, before 600 - 60 s: not read
    observed_scan(start=at(0), end=at(1200))
    assert "carol" in set(observed_jobs().values_list("user", flat=True))
    assert ObservedScanState.objects.get(node=gpu0.node).scanned_to == at(1200)


def test_the_command_rescans_history_and_names_bad_arguments(gpu0):
    from io import StringIO

    from django.core.management import CommandError, call_command

    store(records(gpu0.uuid, 0, 300, [proc("alice")]))
    out = StringIO()
    call_command("observed_scan", "--start", at(0).isoformat(), "--end", at(300).isoformat(), stdout=out)
    assert "observed_jobs_written 1" in out.getvalue()
    assert list(observed_jobs().values_list("user", flat=True)) == ["alice"]
    with pytest.raises(CommandError, match="needs a UTC offset"):
        call_command("observed_scan", "--start", "2026-11-02T00:00:00", "--end", at(300).isoformat())
    with pytest.raises(CommandError, match="go together"):
        call_command("observed_scan", "--start", at(0).isoformat())
