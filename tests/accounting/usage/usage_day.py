"""The hand-made day of the usage tests (two teams, jobs and a booking, idle stretches, a node outage, a
sample gap, a MIG slice, an unplaced job) and its helpers; the ``day`` fixture is in conftest.py."""

from datetime import date, timedelta
from fractions import Fraction

from cluster.bookings.services import booking_create
from cluster.models import Allocation, Gpu, GpuModel, Job, MinuteRollup, Node, NodeStatusPeriod
from tests.conftest import T0

DAY = date(2026, 11, 2)
NOW = T0 + timedelta(days=1, hours=1)  # the next day, 01:00: the day is over
GPU = 840_000


def at(hours: float):
    return T0 + timedelta(hours=hours)


def rollups(gpu, start_h, end_h, util, covered=60):
    minutes = round((end_h - start_h) * 60)
    MinuteRollup.objects.bulk_create([
        MinuteRollup(gpu=gpu, bucket=at(start_h) + timedelta(minutes=m), util_mean=util, util_max=util,
                     covered_s=covered, util_covered_s=covered, sample_count=6)
        for m in range(minutes)
    ])


def job(team, gpu, start_h, end_h, *, share=GPU, model=None, name="j"):
    run = Job.objects.create(source="api", external_id=f"{name}-{start_h}", team=team, state="completed",
                             start_time=at(start_h), end_time=at(end_h))
    Allocation.objects.create(job=run, gpu=gpu, gpu_model=model, share=share, start=at(start_h), end=at(end_h))
    return run


def hours(ticks) -> Fraction:
    return Fraction(ticks, GPU * 3600)


def make_day(team_a, team_b, engineer_a) -> dict:
    model = GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=143771)
    n1 = Node.objects.create(hostname="n1")
    n2 = Node.objects.create(hostname="n2")
    g0, g1 = (Gpu.objects.create(node=n1, index=i, uuid=f"G{i}", model=model, memory_mib=1) for i in (0, 1))
    g2 = Gpu.objects.create(node=n2, index=0, uuid="G2", model=model, memory_mib=1)
    slice_ = Gpu.objects.create(node=n2, index=0, uuid="MIG-1", model=model, memory_mib=1, mig_parent=g2,
                                mig_profile="1g.18gb", share=GPU // 7)
    # g0: team A's job 01:00–03:00: busy an hour, idle to 02:30 (its last minute half measured), then a gap.
    job(team_a, g0, 1, 3, name="a-train")
    rollups(g0, 1, 2, 50.0)
    rollups(g0, 2, 2.5 - 1 / 60, 1.0)
    rollups(g0, 2.5 - 1 / 60, 2.5, 1.0, covered=30)
    # g1: team A's booking 10:00–12:00 with team A's job inside it (counted once); busy the first hour.
    booking_create(user=engineer_a, team=team_a, project=team_a.projects.get(), gpus=[g1], start=at(10), end=at(12),
                   now=T0)
    job(team_a, g1, 10.5, 11.5, name="a-in-booking")
    rollups(g1, 10, 11, 80.0)
    # g1: team B's job 13:00–14:00, busy until the node goes unreachable 13:30–14:30.
    job(team_b, g1, 13, 14, name="b-eval")
    rollups(g1, 13, 13.5, 90.0)
    NodeStatusPeriod.objects.create(node=n1, status="unreachable", started_at=at(13.5), ended_at=at(14.5))
    # g2: team B's job on a 1g MIG slice 00:00–06:00 (MIG reports no utilization).
    job(team_b, slice_, 0, 6, share=GPU // 7, name="b-mig")
    # An unplaced job of team A: 2 GPUs 05:00–07:00.
    job(team_a, None, 5, 7, share=2 * GPU, model=model, name="a-unplaced")
    return {"g0": g0, "g1": g1, "g2": g2}
