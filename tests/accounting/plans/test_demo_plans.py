"""The demo's plan (demo/plans.py): after ``make demo``'s loaders, each team's plan has queued and running jobs
by priority, finished jobs with estimates far off (over and under), and jobs that waited for data."""

from datetime import UTC, datetime

import pytest
import time_machine

from accounting.plans import rules
from accounting.plans.selectors import team_plan
from demo.cluster import load_demo
from demo.history import load_demo_history
from demo.plans import load_demo_plans
from teams.models import Team

pytestmark = [pytest.mark.django_db, pytest.mark.clock]
NOW = datetime(2026, 11, 20, 4, 0, tzinfo=UTC)


@time_machine.travel(NOW, tick=False)
def test_the_demo_plan_tells_a_story(settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = settings.TIME_ZONE = "Asia/Shanghai"  # as `make demo` runs
    load_demo(history_days=0)
    load_demo_history(days=3, now=NOW)
    first = load_demo_plans(now=NOW)
    assert first["estimated"] > 0 and first["open_jobs"] == 12
    assert load_demo_plans(now=NOW) == {"estimated": 0, "waited_for_data": 0, "open_jobs": 0}  # idempotent
    plan = team_plan(Team.objects.get(slug="llm"), period=NOW.date().replace(day=1), now=NOW)
    assert [row.job.priority for row in plan.open_jobs] == sorted((row.job.priority for row in plan.open_jobs),
                                                                  reverse=True)
    assert any(row.deviation == rules.OVER for row in plan.open_jobs)
    finished = {row.deviation for row in plan.finished_jobs}
    assert {rules.OVER, rules.UNDER, rules.ON_PLAN, rules.NO_ESTIMATE} <= finished, _debug(plan)
    assert any(row.still_waiting for row in plan.waited) and plan.waited_total > 0
    assert sum(week.planned_card_hours for week in plan.weeks) > 0


def _debug(plan):
    return [(r.job.pk % 10, r.job.estimated_card_hours, r.used_card_hours, r.deviation) for r in plan.finished_jobs]
