"""The demo's money: rate cards with last month's price change, quotas (llm close to its own), and last
month closed from the generated history, with its totals adding up; loading again adds nothing."""

from datetime import UTC, date, datetime

import pytest
import time_machine

from accounting.models import DailyUnplacedUsage, DailyUsage, LedgerEntry, Quota, RateCard, Statement
from accounting.money.pricing import TICKS_PER_CARD_HOUR, Entry, lines_of, team_totals
from demo.cluster import load_demo
from demo.history import history_window, load_demo_history
from demo.money import load_demo_money

NOW = datetime(2026, 11, 3, 4, 0, tzinfo=UTC)  # noon in Shanghai: October is over
pytestmark = pytest.mark.django_db


@time_machine.travel(NOW, tick=False)  # load_demo dates the demo's bookings by the clock
def test_last_month_is_closed_and_this_one_has_quotas(settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "Asia/Shanghai"
    load_demo(history_days=0)
    load_demo_history(days=4, now=NOW)
    result = load_demo_money(now=NOW, history_end=history_window(days=4, now=NOW)[1])
    assert result["refused"] == [] and result["closed"]
    statement = Statement.objects.get(pk=result["closed"])
    assert (statement.period, statement.status) == (date(2026, 10, 1), "closed")
    rows = LedgerEntry.objects.filter(statement=statement)
    lines = lines_of([Entry(r.day, r.team_id, r.project_id, r.gpu_model_id, r.kind, r.rate, r.rate_valid_from, r.ticks)
                      for r in rows], "CNY")
    assert lines and sum(team_totals(lines).values()) == sum(line.amount for line in lines)
    assert {line.rate_valid_from for line in lines} >= {date(2026, 10, 1)}
    assert RateCard.objects.filter(valid_from=date(2026, 10, 15)).count() == 2  # H200 and H100 changed mid-month
    assert Quota.objects.filter(period_start=date(2026, 11, 1)).count() == 3
    llm = Quota.objects.get(team__slug="llm")
    used = sum(DailyUsage.objects.filter(team=llm.team, day__gte=llm.period_start, state__in=("busy", "idle", "unmeasured"))
               .values_list("ticks", flat=True))
    used += sum(DailyUnplacedUsage.objects.filter(team=llm.team, day__gte=llm.period_start).values_list("ticks", flat=True))
    assert 0.85 <= used / TICKS_PER_CARD_HOUR / float(llm.card_hours) <= 0.95
    from cluster.models import Alert

    assert Alert.objects.open().filter(subject_type="quota", subject_id=llm.pk, kind="quota_90").exists()
    counts = (Statement.objects.count(), LedgerEntry.objects.count(), Quota.objects.count(), RateCard.objects.count())
    load_demo_money(now=NOW)
    assert (Statement.objects.count(), LedgerEntry.objects.count(), Quota.objects.count(),
            RateCard.objects.count()) == counts
