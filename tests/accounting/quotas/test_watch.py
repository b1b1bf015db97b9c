"""Quota warnings over a simulated month with a fixed clock (accounting/quotas/watch.py)."""

from datetime import date, timedelta
from decimal import Decimal

import pytest

from accounting.models import DailyUsage, Quota
from accounting.quotas.rules import TICKS_PER_CARD_HOUR
from accounting.quotas.watch import quota_alerts
from cluster.choices import AlertKind, AlertSubject, AlertTier
from cluster.models import Alert, Gpu
from core.timeutils import business_day_bounds

pytestmark = pytest.mark.django_db

START = date(2026, 11, 1)
EXPIRES = date(2026, 12, 1)
PER_DAY = 5  # card-hours a day: 50 % on day 10, 75 % on 15, 90 % on 18, 100 % on 20 of a 100 card-hour quota


def noon(day):
    return business_day_bounds(day)[0] + timedelta(hours=12)


def use(team, gpu, day, card_hours=PER_DAY):
    DailyUsage.objects.create(day=day, gpu=gpu, state="busy", team=team, project=team.projects.get(),
                              ticks=card_hours * TICKS_PER_CARD_HOUR)


def quota_alerts_of(quota):
    return Alert.objects.filter(subject_type=AlertSubject.QUOTA, subject_id=quota.pk)


@pytest.fixture
def quota(team_a, small_cluster):
    return Quota.objects.create(team=team_a, period_start=START, expires=EXPIRES, card_hours=Decimal(100))


def test_it_raises_each_threshold_once_on_its_day_and_closes_when_the_quota_is_raised(quota, team_a):
    gpu = Gpu.objects.first()
    opened_on = {}
    day = START
    while day < date(2026, 11, 25):
        use(team_a, gpu, day)
        for _run in range(2):  # a rerun on the same day opens nothing new
            quota_alerts(now=noon(day))
        for alert in quota_alerts_of(quota):
            opened_on.setdefault(alert.kind, day)
        day += timedelta(days=1)

    assert opened_on == {
        AlertKind.QUOTA_50: date(2026, 11, 10), AlertKind.QUOTA_75: date(2026, 11, 15),
        AlertKind.QUOTA_90: date(2026, 11, 18), AlertKind.QUOTA_100: date(2026, 11, 20),
        AlertKind.QUOTA_EXPIRY: date(2026, 11, 16),  # 15 days before 1 December
    }
    for kind in opened_on:
        assert quota_alerts_of(quota).filter(kind=kind).count() == 1, kind
    alerts = {alert.kind: alert for alert in quota_alerts_of(quota)}
    assert alerts[AlertKind.QUOTA_100].tier == AlertTier.CRITICAL
    assert {alerts[kind].tier for kind in opened_on if kind != AlertKind.QUOTA_100} == {AlertTier.WARNING}
    assert alerts[AlertKind.QUOTA_50].subject_label == "Team Alpha quota"
    # Each keeps the figure of its crossing (100 card-hours on 20 November), not the latest (120 on the 24th),
    # and links to the team page.
    assert alerts[AlertKind.QUOTA_50].message.startswith("Crossed 50 % on ")
    assert "card-hours used" in alerts[AlertKind.QUOTA_50].message
    assert alerts[AlertKind.QUOTA_100].details["used_card_hours"] == "100.000"
    assert "100.000 of 100.000 card-hours used (100.0 %)" in alerts[AlertKind.QUOTA_100].message
    assert alerts[AlertKind.QUOTA_100].details["as_of"] == noon(date(2026, 11, 20)).isoformat()
    assert alerts[AlertKind.QUOTA_100].last_seen_at == noon(date(2026, 11, 24))
    assert alerts[AlertKind.QUOTA_50].details["path"] == f"/teams/{team_a.slug}/"

    # Raised to 200 card-hours on 25 November (125 used, 62.5 %): 75, 90 and 100 % end; 50 % stays open.
    quota.card_hours = Decimal(200)
    quota.save()
    use(team_a, gpu, date(2026, 11, 25))
    quota_alerts(now=noon(date(2026, 11, 25)))
    still_open = set(quota_alerts_of(quota).open().values_list("kind", flat=True))
    assert still_open == {AlertKind.QUOTA_50, AlertKind.QUOTA_EXPIRY}
    closed = quota_alerts_of(quota).filter(closed_at__isnull=False)
    assert {alert.kind for alert in closed} == {AlertKind.QUOTA_75, AlertKind.QUOTA_90, AlertKind.QUOTA_100}
    assert {alert.closed_at for alert in closed} == {noon(date(2026, 11, 25))}

    # Expired: every open episode of the quota ends, and nothing opens again.
    quota_alerts(now=noon(EXPIRES))
    quota_alerts(now=noon(EXPIRES + timedelta(days=1)))
    assert not quota_alerts_of(quota).open().exists()
    assert quota_alerts_of(quota).count() == 5


def test_it_closes_the_expiry_warning_when_the_quota_is_extended(quota, team_a):
    quota_alerts(now=noon(date(2026, 11, 20)))
    assert quota_alerts_of(quota).open().get().kind == AlertKind.QUOTA_EXPIRY
    assert "in 11 days" in quota_alerts_of(quota).get().message
    quota.expires = date(2027, 1, 1)
    quota.save()
    quota_alerts(now=noon(date(2026, 11, 21)))
    assert not quota_alerts_of(quota).open().exists()


def test_it_labels_a_model_quota_and_leaves_other_teams_alone(team_a, team_b, small_cluster):
    h200 = small_cluster["h200"]
    quota = Quota.objects.create(team=team_a, gpu_model=h200, period_start=START, expires=date(2027, 3, 1),
                                 card_hours=Decimal(10))
    other = Quota.objects.create(team=team_b, period_start=START, expires=date(2027, 3, 1), card_hours=Decimal(10))
    use(team_a, Gpu.objects.get(uuid="GPU-h200-a-0"), date(2026, 11, 3), card_hours=6)
    use(team_a, Gpu.objects.get(uuid="GPU-l40s-a-0"), date(2026, 11, 3), card_hours=6)  # not H200
    quota_alerts(now=noon(date(2026, 11, 3)))
    alert = quota_alerts_of(quota).get()
    assert (alert.kind, alert.subject_label) == (AlertKind.QUOTA_50, "Team Alpha H200 quota")
    assert not quota_alerts_of(other).exists()
