"""job_upsert: the one write path of jobs and their allocations."""

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection

from cluster.jobs.services import JobInput, Outcome, job_upsert
from cluster.models import Allocation, Gpu, Job
from tests.conftest import T0

pytestmark = pytest.mark.django_db


def run(team, /, **fields):
    base = {"source": "slurm", "external_id": "42", "start_time": T0, "team": team, "gpu_count": Decimal(2), "state": "running"}
    return JobInput(**{**base, **fields})


def test_the_same_facts_twice_change_nothing(team_a, small_cluster):
    gpus = list(Gpu.objects.filter(node__hostname="h200-a"))
    assert job_upsert(run(team_a, gpus=gpus))[1] == Outcome.CREATED
    assert job_upsert(run(team_a, gpus=gpus))[1] == Outcome.UNCHANGED
    assert Job.objects.count() == 1
    assert Allocation.objects.count() == 2


def test_an_end_time_closes_the_allocations(team_a, small_cluster):
    gpus = list(Gpu.objects.filter(node__hostname="h200-a"))
    job_upsert(run(team_a, gpus=gpus))
    _job, outcome = job_upsert(run(team_a, gpus=gpus, end_time=T0 + timedelta(hours=1), state="completed"))
    assert outcome == Outcome.UPDATED
    assert set(Allocation.objects.values_list("end", flat=True)) == {T0 + timedelta(hours=1)}


def test_unknown_gpus_make_one_unplaced_allocation_holding_all_of_them(team_a):
    job, _ = job_upsert(run(team_a, gpu_count=Decimal("2.5")))
    allocation = Allocation.objects.get(job=job)
    assert (allocation.gpu, allocation.share) == (None, 2_100_000)


def test_a_requeued_job_keeps_each_run(team_a):
    job_upsert(run(team_a, state="requeued", end_time=T0 + timedelta(minutes=5)))
    job_upsert(run(team_a, start_time=T0 + timedelta(minutes=7)))
    assert Job.objects.filter(external_id="42").count() == 2


def test_a_pending_run_that_starts_is_the_same_run(team_a):
    pending, _ = job_upsert(run(team_a, start_time=None, state="pending"))
    started, outcome = job_upsert(run(team_a, start_time=T0, state="running"))
    assert (started.pk, outcome) == (pending.pk, Outcome.UPDATED)
    assert Job.objects.count() == 1
    assert Allocation.objects.get(job=started).start == T0


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"gpu_count": Decimal(-1)}, "gpu_count: must not be negative"),
        ({"end_time": T0 - timedelta(seconds=1)}, "end_time: is before start_time"),
        ({"team": None}, "team: is required"),
        ({"state": "exploded"}, "state: must be one of"),
    ],
)
def test_bad_facts_are_refused_naming_the_field(team_a, fields, message):
    with pytest.raises(ValueError, match=message):
        job_upsert(run(team_a, **fields))
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_first_reports_at_once_make_one_row(team_a):
    barrier, errors = threading.Barrier(2), []

    def report():
        try:
            barrier.wait(5)
            job_upsert(run(team_a))
        except Exception as error:  # collected and asserted below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=report) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert errors == []
    assert Job.objects.count() == 1
    assert Allocation.objects.count() == 1


def test_a_job_counts_its_usage_once_whichever_ways_its_gpus_are_known(team_a, small_cluster):
    from cluster.jobs.selectors import spans_of
    from cluster.models import AllocationOrigin

    job, _ = job_upsert(run(team_a))  # unplaced: the scheduler did not say which GPUs
    gpu = Gpu.objects.get(uuid="GPU-h200-a-0")
    Allocation.objects.create(job=job, gpu=gpu, share=gpu.share, start=T0, end=T0 + timedelta(minutes=30),
                              origin=AllocationOrigin.OBSERVED)
    counted = Allocation.objects.filter(job=job).counted()
    assert [(a.gpu_id, a.origin) for a in counted] == [(gpu.pk, "observed")]
    assert [span.gpu_id for span in spans_of(list(job.allocations.all()))] == [gpu.pk]
