"""Daily usage aggregates from a hand-made day: two teams, jobs and a booking (a job inside it counted
once), idle stretches, a node outage, a sample gap, a MIG slice, an unplaced job, and a late batch of
samples that turns unmeasured into busy. Every figure is checked in exact card-hours."""

from collections import defaultdict
from datetime import timedelta
from fractions import Fraction

import pytest

from accounting.models import DailyUnplacedUsage, DailyUsage, UsageDirty
from accounting.usage.services import aggregate_day, usage_process, usage_recompute
from cluster.models import Job
from tests.accounting.usage.usage_day import DAY, NOW, at, hours, rollups
from tests.conftest import T0

pytestmark = pytest.mark.django_db


def figures(day=DAY) -> dict:
    out = defaultdict(Fraction)
    for row in DailyUsage.objects.filter(day=day).select_related("gpu__node", "team"):
        name = f"{row.gpu.node.hostname}/{row.gpu.index}"
        out[(name, row.state, row.team.slug if row.team else None)] += hours(row.ticks)
    return dict(out)


def test_every_figure_of_the_day(day):
    aggregate_day(day=DAY, now=NOW)
    half_min = Fraction(30, 3600)
    assert figures() == {
        ("n1/0", "busy", "alpha"): 1,
        ("n1/0", "idle", "alpha"): Fraction(1, 2) - half_min,
        ("n1/0", "unmeasured", "alpha"): Fraction(1, 2) + half_min,
        ("n1/0", "down", None): 1,
        ("n1/0", "unallocated", None): 21,
        ("n1/1", "busy", "alpha"): 1,  # the booking's, not the job's inside it
        ("n1/1", "unmeasured", "alpha"): 1,
        ("n1/1", "busy", "beta"): Fraction(1, 2),
        ("n1/1", "down", None): 1,  # 13:30–14:30: half of it B's job, unmeasured while down → down
        ("n1/1", "unallocated", None): Fraction(41, 2),
        ("n2/0", "unmeasured", "beta"): Fraction(6, 7),
        ("n2/0", "unallocated", None): 24 - Fraction(6, 7),
    }
    unplaced = DailyUnplacedUsage.objects.get(day=DAY)
    assert (unplaced.team.slug, hours(unplaced.ticks), unplaced.gpu_model.short_name) == ("alpha", 4, "H200")


def test_the_states_add_up_to_capacity_per_gpu(day):
    aggregate_day(day=DAY, now=NOW)
    per_gpu = defaultdict(Fraction)
    for (name, _state, _team), value in figures().items():
        per_gpu[name] += value
    assert dict(per_gpu) == {"n1/0": 24, "n1/1": 24, "n2/0": 24}


def test_the_booking_project_is_the_ones_charged(day, team_a):
    aggregate_day(day=DAY, now=NOW)
    rows = DailyUsage.objects.filter(day=DAY, gpu=day["g1"], team=team_a)
    assert {row.project.slug for row in rows} == {"alpha-pre"}


def test_late_samples_turn_unmeasured_into_busy(day):
    usage_process(now=NOW)
    assert figures()[("n1/0", "unmeasured", "alpha")] == Fraction(1, 2) + Fraction(30, 3600)
    assert not UsageDirty.objects.exists()
    rollups(day["g0"], 2.5, 3, 60.0)  # the agent's spool arrives after an outage
    assert UsageDirty.objects.exists()  # the trigger marked the range
    result = usage_process(now=NOW + timedelta(minutes=5))
    assert result["marks"] >= 1 and result["days_redone"] == 1
    after = figures()
    assert after[("n1/0", "busy", "alpha")] == Fraction(3, 2)
    assert after[("n1/0", "unmeasured", "alpha")] == Fraction(30, 3600)


def test_a_team_mapped_later_moves_the_usage(day, team_b):
    usage_process(now=NOW)
    Job.objects.filter(external_id__startswith="b-eval").update(team=None, source="observed")
    usage_process(now=NOW + timedelta(minutes=5))
    assert ("n1/1", "busy", "beta") not in figures() and figures()[("n1/1", "busy", None)] == Fraction(1, 2)


def test_aggregating_twice_gives_the_same_rows(day):
    def snapshot():
        return sorted(DailyUsage.objects.values_list("day", "gpu_id", "state", "team_id", "project_id", "ticks"))

    aggregate_day(day=DAY, now=NOW)
    first = snapshot()
    aggregate_day(day=DAY, now=NOW)
    usage_recompute(start=T0, end=T0 + timedelta(days=1), now=NOW)
    assert snapshot() == first


def test_today_counts_up_to_now_only(day):
    aggregate_day(day=DAY, now=at(2))
    per_gpu = defaultdict(Fraction)
    for (name, _state, _team), value in figures().items():
        per_gpu[name] += value
    assert dict(per_gpu) == {"n1/0": 2, "n1/1": 2, "n2/0": 2}


@pytest.mark.django_db(transaction=True)
def test_two_aggregations_at_once_give_the_rows_of_one(day):
    import threading

    from django.db import connection

    aggregate_day(day=DAY, now=NOW)
    expected = sorted(DailyUsage.objects.values_list("gpu_id", "state", "team_id", "project_id", "ticks"))
    barrier, errors = threading.Barrier(2), []

    def run():
        try:
            barrier.wait()
            usage_recompute(start=T0, end=T0 + timedelta(days=1), now=NOW)
        except Exception as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(DailyUsage.objects.values_list("gpu_id", "state", "team_id", "project_id", "ticks")) == expected


def test_the_task_runs_the_aggregation(day):
    from accounting.tasks import usage_aggregate

    result = usage_aggregate.apply().get()
    assert result["open_days"] >= 1 and DailyUsage.objects.exists()
