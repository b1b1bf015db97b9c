"""Quota warnings (DESIGN.md §6): each active quota's 50/75/90/100 % thresholds and its expiry, raised as
alerts once per episode and closed when the condition ends. Rerunnable: a second run refreshes the open
episodes and opens nothing new.

A threshold alert keeps the figures of its crossing (what was used when it opened, and the forecast
then): later runs only mark it still seen, so an alert never shows a figure that disagrees with the
quota's own, current one on the team page, which it links to. The expiry warning says only when the
quota expires (refreshed each day: the days left)."""

from __future__ import annotations

from datetime import datetime

from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from accounting.models import Quota
from accounting.quotas.selectors import QuotaStatus, quota_statuses
from cluster.choices import AlertKind, AlertSubject, AlertTier
from cluster.models import Alert
from cluster.status.services import alert_close, alert_raise
from core.languages import in_every_language
from core.timeutils import business_today

THRESHOLD_KINDS = {50: AlertKind.QUOTA_50, 75: AlertKind.QUOTA_75, 90: AlertKind.QUOTA_90, 100: AlertKind.QUOTA_100}
QUOTA_KINDS = (*THRESHOLD_KINDS.values(), AlertKind.QUOTA_EXPIRY)


def quota_label(quota: Quota) -> str:
    """How a quota reads in an alert: "Team Alpha H200 quota" or "Team Alpha quota"."""
    if quota.gpu_model_id is not None:
        return _("%(team)s %(model)s quota") % {"team": quota.team.name, "model": quota.gpu_model.short_name}
    return _("%(team)s quota") % {"team": quota.team.name}


def threshold_tier(threshold: int) -> str:
    """Quota ≥ 100 % is critical, the lower thresholds are warnings (DESIGN.md §6)."""
    return AlertTier.CRITICAL if threshold >= 100 else AlertTier.WARNING


def _crossing_message(status: QuotaStatus, threshold: int, now: datetime) -> str:
    """What a threshold alert says, as of its crossing."""
    forecast = status.forecast
    used = _("Crossed %(threshold)d %% on %(when)s: %(used)s of %(quota)s card-hours used (%(percent)s %%).") % {
        "threshold": threshold, "when": date_format(timezone.localtime(now), "SHORT_DATETIME_FORMAT"),
        "used": status.used_card_hours, "quota": status.quota.card_hours, "percent": status.used_percent,
    }
    if forecast.exhausted:
        return used
    if forecast.run_out is None:
        return used + " " + _("Nothing was burning it then.")
    return used + " " + _("At the mean burn of the last %(days)d days it would run out on %(day)s "
                          "(expires %(expires)s).") % {
        "days": forecast.burn_days, "day": date_format(forecast.run_out), "expires": date_format(status.quota.expires),
    }


def _details(status: QuotaStatus, now: datetime) -> dict:
    forecast = status.forecast
    return {
        "quota_id": status.quota.pk, "team_id": status.quota.team_id,
        "used_card_hours": str(status.used_card_hours), "quota_card_hours": str(status.quota.card_hours),
        "used_percent": str(status.used_percent), "expires": status.quota.expires.isoformat(),
        "run_out": forecast.run_out.isoformat() if forecast.run_out else None, "as_of": now.isoformat(),
        "path": reverse("accounting:team-detail", args=[status.quota.team.slug]),
    }


def quota_alerts(*, now: datetime) -> dict:
    """Raise, refresh and close the quota alerts as of ``now``. Returns counts of what changed."""
    today = business_today(now=now)
    opened = closed = 0
    active = list(
        Quota.objects.filter(period_start__lte=today, expires__gt=today).select_related("team", "gpu_model")
        .order_by("pk")
    )
    for status in quota_statuses(quotas=active, today=today, now=now):
        quota = status.quota
        label = quota_label(quota)
        reached = set(status.thresholds)
        details = _details(status, now)
        for threshold, kind in THRESHOLD_KINDS.items():
            if threshold in reached:
                _alert, new = alert_raise(
                    subject_type=AlertSubject.QUOTA, subject_id=quota.pk, subject_label=label, kind=kind,
                    tier=threshold_tier(threshold),
                    message=in_every_language(lambda s=status, t=threshold: _crossing_message(s, t, now)),
                    details=details, at=now, keep_message=True,
                )
                opened += new
            else:
                closed += alert_close(subject_type=AlertSubject.QUOTA, subject_id=quota.pk, kind=kind, at=now)
        if status.expiry_warning:
            days_left = (quota.expires - today).days
            expiry_message = in_every_language(lambda q=quota, n=days_left: ngettext(
                "Expires on %(day)s, in %(days)d day.", "Expires on %(day)s, in %(days)d days.", n,
            ) % {"day": date_format(q.expires), "days": n})
            _alert, new = alert_raise(
                subject_type=AlertSubject.QUOTA, subject_id=quota.pk, subject_label=label,
                kind=AlertKind.QUOTA_EXPIRY, tier=AlertTier.WARNING, message=expiry_message, details=details, at=now,
            )
            opened += new
        else:
            closed += alert_close(subject_type=AlertSubject.QUOTA, subject_id=quota.pk, kind=AlertKind.QUOTA_EXPIRY,
                                  at=now)
    # Quotas no longer in force (expired, moved, deleted): their episodes end.
    active_ids = {quota.pk for quota in active}
    stale = (
        Alert.objects.open().filter(subject_type=AlertSubject.QUOTA, kind__in=QUOTA_KINDS)
        .exclude(subject_id__in=active_ids)
    )
    closed += stale.update(closed_at=now)
    return {"opened": opened, "closed": closed}
