"""The backtest's recorded minutes read from the database (boards/backtest/inputs.py) and priced
(boards/backtest/report.py), on the hand-made day of tests/boards/backtest/history.py."""

from datetime import timedelta
from decimal import Decimal

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from boards.backtest.inputs import Scope, recorded
from boards.backtest.report import run_backtest
from boards.backtest.simulate import MEMORY, UTILIZATION, RuleSet
from tests.conftest import T0

pytestmark = pytest.mark.clock
NOW = T0 + timedelta(hours=10)


def day_scope(history, **scope) -> Scope:
    return Scope(start=history.lo, end=history.lo + timedelta(days=1), gpu_model_id=history.h200.pk, **scope)


def spans(values: np.ndarray) -> list[tuple[int, int, float]]:
    """(first, end, value) of each run of equal values (the arrays are easier to read as spans)."""
    out, first = [], 0
    for t in range(1, len(values) + 1):
        if t == len(values) or values[t] != values[first]:
            out.append((first, t, values[first]))
            first = t
    return out


def test_a_teams_minutes_count_its_jobs_and_bookings_on_the_model(history, team_a):
    minutes = recorded(day_scope(history, team_id=team_a.pk), now=NOW)
    assert minutes.minutes == 1440
    assert spans(minutes.held) == [(0, 60, 0), (60, 180, 2), (180, 300, 0), (300, 360, 1), (360, 1440, 0)]
    assert np.array_equal(minutes.in_use, minutes.held)
    # J1's two GPUs from its submission to its start; J4's 1.5 GPUs (rounded up) from minute 400, still waiting
    assert spans(minutes.queued) == [(0, 30, 0), (30, 60, 2), (60, 400, 0), (400, 1440, 2)]
    util, memory = minutes.load[UTILIZATION], minutes.load[MEMORY]
    assert util[60] == pytest.approx(160) and util[300] == pytest.approx(10) and util[0] == 0 and util[200] == 0
    assert memory[100] == pytest.approx(100, abs=0.01) and memory[330] == pytest.approx(10, abs=0.01)


def test_a_pools_minutes_count_its_reporting_gpus_and_every_teams_claims(history):
    minutes = recorded(day_scope(history, pool="train"), now=NOW)
    assert spans(minutes.held) == [(0, 60, 1), (60, 120, 2), (120, 180, 3), (180, 240, 1), (240, 300, 0),
                                   (300, 360, 1), (360, 1440, 0)]
    assert spans(minutes.in_use) == [(0, 60, 0), (60, 120, 2), (120, 180, 3), (180, 240, 1), (240, 300, 0),
                                     (300, 360, 1), (360, 1440, 0)]
    assert spans(minutes.queued) == [(0, 30, 0), (30, 60, 2), (60, 1440, 0)]  # J4 was never placed: no pool
    assert minutes.load[UTILIZATION][10] == pytest.approx(1) and minutes.load[UTILIZATION][150] == pytest.approx(200)


def test_minutes_after_now_are_not_replayed(history, team_a):
    now = history.lo + timedelta(hours=2, seconds=30)
    assert recorded(day_scope(history, team_id=team_a.pk), now=now).minutes == 120


def test_the_reads_take_a_fixed_number_of_queries(history, team_a):
    with CaptureQueriesContext(connection) as queries:
        recorded(day_scope(history, team_id=team_a.pk), now=NOW)
    assert len(queries) == 5  # the GPUs, the bookings, the allocations, one aggregate of the rollups, the queue
    with CaptureQueriesContext(connection) as queries:
        recorded(day_scope(history, pool="train"), now=NOW)
    assert len(queries) == 5


def test_the_report_prices_the_card_hours_saved_at_the_rate_card(history, team_a):
    rule = RuleSet("floor of 4", metric=UTILIZATION, up_pct=80, down_pct=20, group=4, minimum=4, maximum=4,
                   cooldown_minutes=0)
    report = run_backtest(day_scope(history, team_id=team_a.pk), [rule], now=NOW)
    # actually held: 2 GPUs × 120 min + 1 × 60 = 300 GPU-minutes = 5 card-hours; the rule holds 4 all day = 96
    assert report.actual.card_hours == Decimal("5.00")
    figures = report.rules[0]
    assert figures.card_hours == Decimal("96.00") and figures.saved_card_hours == Decimal("-91.00")
    assert figures.saved_cost == Decimal("-1820.00")  # −91 card-hours × 20
    assert figures.outcome.under_minutes == 0 and figures.peak_gpus == 4 and report.unpriced_days == []


def test_a_day_without_a_rate_card_is_named_and_left_unpriced(history, team_a):
    from accounting.models import RateCard

    RateCard.objects.all().delete()
    report = run_backtest(day_scope(history, team_id=team_a.pk), [RuleSet("r", minimum=0, maximum=8)], now=NOW)
    assert report.rules[0].saved_cost is None and [d.isoformat() for d in report.unpriced_days] == ["2026-10-05"]
