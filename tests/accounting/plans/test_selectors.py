"""The plan's one read (issue 19) on database rows: figures by hand in conftest.py."""

from datetime import date, timedelta
from decimal import Decimal

import pytest

from accounting.plans import rules
from accounting.plans.selectors import team_plan
from tests.accounting.plans.conftest import NOVEMBER, NOW

pytestmark = [pytest.mark.django_db, pytest.mark.clock]


def test_queued_and_running_jobs_by_priority_with_used_so_far_and_ratio(plan_month, team_a):
    plan = team_plan(team_a, period=NOVEMBER, now=NOW)
    rows = [(r.job.name, r.used_card_hours, r.ratio_pct, r.deviation) for r in plan.open_jobs]
    assert rows == [
        ("queued-high", Decimal("0.00"), None, rules.ON_PLAN),  # not started: no ratio yet
        ("waiting", Decimal("2.00"), Decimal("50.0"), rules.ON_PLAN),  # running: not under
        ("over", Decimal("20.00"), Decimal("200.0"), rules.OVER),
        ("queued-none", Decimal("0.00"), None, rules.NO_ESTIMATE),  # no priority: last; no estimate: no ratio
    ]
    assert plan.queued_estimate_card_hours == Decimal("8.000")
    assert plan.open_over == 1


def test_used_so_far_counts_to_the_application_clock(plan_month, team_a):
    later = team_plan(team_a, period=NOVEMBER, now=NOW + timedelta(hours=1))
    assert {r.job.name: r.used_card_hours for r in later.open_jobs}["over"] == Decimal("22.00")  # 2 GPUs, 1 h more


def test_finished_jobs_of_the_month_with_actual_over_estimate(plan_month, team_a):
    plan = team_plan(team_a, period=NOVEMBER, now=NOW)
    rows = [(r.job.name, r.used_card_hours, r.ratio_pct, r.deviation) for r in plan.finished_jobs]
    assert rows == [  # latest end first; October's and Team Beta's are not here
        ("unestimated", Decimal("2.00"), None, rules.NO_ESTIMATE),
        ("close", Decimal("4.00"), Decimal("90.9"), rules.ON_PLAN),
        ("under", Decimal("5.00"), Decimal("50.0"), rules.UNDER),
        ("across", Decimal("8.00"), Decimal("100.0"), rules.ON_PLAN),
    ]
    assert (plan.finished_over, plan.finished_under) == (0, 1)


def test_weeks_planned_against_the_daily_usage(plan_month, team_a):
    plan = team_plan(team_a, period=NOVEMBER, now=NOW)
    rows = [(w.first, w.planned_card_hours, w.actual_card_hours, w.ratio_pct, w.deviation, w.partial)
            for w in plan.weeks]
    assert rows == [
        (date(2026, 11, 1), Decimal("0.00"), Decimal("0.00"), None, rules.NO_ESTIMATE, False),
        (date(2026, 11, 2), Decimal("4.00"), Decimal("4.00"), Decimal("100.0"), rules.ON_PLAN, False),
        (date(2026, 11, 9), Decimal("14.00"), Decimal("9.00"), Decimal("64.3"), rules.UNDER, False),
        # 4 + 2 + 3 unplaced + 20 = 29 of 18.4 so far; Team Beta's 50 and the unallocated 24 are not the team's
        (date(2026, 11, 16), Decimal("18.40"), Decimal("29.00"), Decimal("157.6"), rules.OVER, True),
        (date(2026, 11, 23), Decimal("0.00"), None, None, rules.NO_ESTIMATE, False),
        (date(2026, 11, 30), Decimal("0.00"), None, None, rules.NO_ESTIMATE, False),
    ]
    assert (plan.planned_total, plan.actual_total) == (Decimal("36.40"), Decimal("42.00"))


def test_a_partial_week_under_its_plan_is_not_flagged_under(plan_month, team_a):
    plan = team_plan(team_a, period=NOVEMBER, now=NOW, deviation_pct=90)  # 157.6 % is within ±90 %
    assert plan.weeks[3].deviation == rules.ON_PLAN and plan.weeks[2].deviation == rules.ON_PLAN


def test_jobs_that_waited_for_data_and_the_card_hours_held(plan_month, team_a):
    plan = team_plan(team_a, period=NOVEMBER, now=NOW)
    rows = [(r.job.name, r.held_card_hours, r.still_waiting, r.waited_to) for r in plan.waited]
    assert rows == [("waiting", Decimal("2.00"), True, NOW), ("under", Decimal("1.00"), False,
                                                               plan_month["under"].data_ready_at)]
    assert plan.waited_total == Decimal("3.00")


def test_another_month_shows_its_own_finished_jobs_and_weeks(plan_month, team_a):
    october = team_plan(team_a, period=date(2026, 10, 1), now=NOW)
    assert [r.job.name for r in october.finished_jobs] == ["october"]
    assert [r.job.name for r in october.open_jobs] == ["queued-high", "waiting", "over", "queued-none"]  # now
    assert all(week.actual is not None for week in october.weeks)  # every October week is over
    assert sum(w.planned_card_hours for w in october.weeks) == Decimal("1.00")


def test_pending_work_is_said_not_shown_as_zero(plan_month, team_a):
    """The jobs were just written: their days are marked for recount, so the plan says its actual may grow."""
    plan = team_plan(team_a, period=NOVEMBER, now=NOW)
    assert plan.pending_buckets > 0 and plan.pending_from is not None
