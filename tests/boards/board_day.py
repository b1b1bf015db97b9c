"""The daily board's test day: the usage tests' hand-made day (tests/accounting/usage/usage_day.py) with
rates, a quota, its hour rollups computed from the minutes and the day aggregated, as the worker leaves it."""

from datetime import date, timedelta
from decimal import Decimal

from accounting.models import Quota, RateCard, UsageAggregateState
from accounting.usage.services import aggregate_day
from cluster.models import DirtyBucket, Job, MinuteRollup
from cluster.telemetry.rollups import rollup_pending
from tests.accounting.usage.usage_day import DAY, NOW, make_day

__all__ = ["DAY", "NOW", "make_board_day", "roll_up_hours"]
SECRET_JOB, SECRET_USER = "alpha secret run", "anna-alpha"


def roll_up_hours() -> None:
    """Hour rollups of every hour that has minute rollups (as the rollup worker computes them)."""
    hours = {(gpu, bucket.replace(minute=0)) for gpu, bucket in MinuteRollup.objects.values_list("gpu_id", "bucket")}
    DirtyBucket.objects.bulk_create([DirtyBucket(level="hour", gpu_id=gpu, bucket=hour) for gpu, hour in hours],
                                    ignore_conflicts=True)
    rollup_pending(levels=("hour",))


def make_board_day(team_a, team_b, engineer_a, *, day: date = DAY) -> dict:
    cells = make_day(team_a, team_b, engineer_a)
    # team A's training job gets a name, a user and a project: what other teams must never see
    Job.objects.filter(external_id__startswith="a-train").update(
        name=SECRET_JOB, user=SECRET_USER, project=team_a.projects.get())
    model = cells["g0"].model
    RateCard.objects.create(gpu_model=model, valid_from=date(2026, 1, 1), price_per_card_hour=Decimal("20.00"),
                            currency="CNY")
    Quota.objects.create(team=team_a, period_start=date(2026, 11, 1), expires=date(2026, 12, 1),
                         card_hours=Decimal("100"))
    roll_up_hours()
    aggregate_day(day=day, now=NOW)
    aggregate_day(day=day - timedelta(days=1), now=NOW)
    UsageAggregateState.objects.update_or_create(id=1, defaults={"aggregated_to": NOW})
    return cells
