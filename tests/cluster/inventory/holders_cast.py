"""A small cluster at one moment (NOW) with what holds each GPU: shared by the holder selector and page tests.

h200-a (up): GPU 0 runs team A's job (busy), GPU 1 is booked by team B (no measurement: "no data"), and
GPU 1's two MIG instances: the first runs team B's job (idle), the second is free with only a stale rollup.
h200-b (unreachable) still has team A's job on its GPU 0; l40s-a is in maintenance. A finished job of team
A and a cancelled hold hold nothing now.
"""

from dataclasses import dataclass
from datetime import timedelta

from cluster.bookings.services import booking_create
from cluster.models import Allocation, Gpu, GpuHold, Job, JobSource, JobState, MinuteRollup
from teams.models import Project
from tests.conftest import T0

NOW = T0 + timedelta(hours=10, seconds=30)
MINUTE = timedelta(minutes=1)

# What only team B's members (and admin, finance) may read.
B_SECRETS = ("beta-secret-job", "bob-b", "Beta vision", "beta-secret-purpose", "bo-lead-b")
A_SECRETS = ("alpha-secret-job", "alice-a", "Alpha pretraining")


@dataclass
class Cast:
    gpu0: Gpu
    gpu1: Gpu
    mig1: Gpu
    mig2: Gpu
    far_gpu: Gpu  # h200-b, unreachable
    job_a: Job
    job_b: Job
    booking_id: int


def job(team, external_id, name, user, *, start, end=None, state=JobState.RUNNING, gpus=()):
    run = Job.objects.create(
        source=JobSource.SLURM, external_id=external_id, name=name, user=user, team=team,
        project=team.projects.first() if team else None, state=state, submit_time=start, start_time=start,
        end_time=end,
    )
    for gpu in gpus:
        Allocation.objects.create(job=run, gpu=gpu, share=gpu.share, start=start, end=end)
    return run


def rollup(gpu, at, util):
    MinuteRollup.objects.create(
        gpu=gpu, bucket=at.replace(second=0, microsecond=0), covered_s=60, util_covered_s=60 if util is not None else 0,
        sample_count=6, util_mean=util, util_max=util, mem_used_max_mib=1024,
    )


def make_cast(small_cluster, team_a, team_b, lead_b) -> Cast:
    gpu0, gpu1 = Gpu.objects.get(uuid="GPU-h200-a-0"), Gpu.objects.get(uuid="GPU-h200-a-1")
    mig1, mig2 = (
        Gpu.objects.create(
            node=gpu1.node, index=1, uuid=f"MIG-h200-a-1-{slot}", model=gpu1.model, memory_mib=9856,
            mig_parent=gpu1, mig_profile="1g.10gb", share=120000,
        )
        for slot in (1, 2)
    )
    far_gpu = Gpu.objects.get(uuid="GPU-h200-b-0")
    job_a = job(team_a, "1001", "alpha-secret-job", "alice-a", start=NOW - timedelta(hours=3), gpus=[gpu0])
    job(team_a, "1002", "alpha-finished", "alice-a", start=NOW - timedelta(hours=5), end=NOW - timedelta(hours=1),
        state=JobState.COMPLETED, gpus=[gpu1])
    job(team_a, "1003", "alpha-far", "alice-a", start=NOW - timedelta(hours=2), gpus=[far_gpu])
    job_b = job(team_b, "2001", "beta-secret-job", "bob-b", start=NOW - timedelta(hours=1),
                end=NOW + timedelta(hours=1), gpus=[mig1])
    booking = booking_create(
        user=lead_b, team=team_b, gpus=[gpu1], start=T0 + timedelta(hours=9), end=T0 + timedelta(hours=12),
        project=Project.objects.get(name="Beta vision"), note="beta-secret-purpose", now=T0,
    )
    cancelled = booking_create(
        user=lead_b, team=team_b, gpus=[gpu0], start=T0 + timedelta(hours=9), end=T0 + timedelta(hours=10, minutes=30),
        now=T0,
    )
    GpuHold.objects.filter(booking=cancelled).update(active=False)
    rollup(gpu0, NOW - 4 * MINUTE, 10.0)
    rollup(gpu0, NOW - 2 * MINUTE, 80.0)
    rollup(gpu0, NOW - MINUTE, None)  # the newest minute has no utilization: the one before counts
    rollup(mig1, NOW - MINUTE, 3.0)
    rollup(mig2, NOW - 10 * MINUTE, 90.0)  # too old to be "now"
    return Cast(gpu0, gpu1, mig1, mig2, far_gpu, job_a, job_b, booking.pk)

