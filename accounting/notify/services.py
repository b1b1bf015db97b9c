"""Alerts reaching people (DESIGN.md §6). ``fan_out`` turns newly opened warning and critical alerts into
in-app notifications for their recipients, e-mails critical ones at once and queues their webhook
deliveries; ``send_digests`` e-mails each person their warnings once a day at a local time. Both are
rerunnable: what was created or sent is never created or sent again."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, time, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from accounting.models import DigestSent, Notification, Quota, Subscription, WebhookDelivery, WebhookEndpoint
from accounting.notify.webhooks import deliver_webhook
from cluster.choices import AlertSubject, AlertTier
from cluster.models import Alert, Booking
from teams.models import Membership
from teams.roles import ADMIN_GROUP, TeamRole

log = logging.getLogger(__name__)
NOTIFIED_TIERS = (AlertTier.CRITICAL, AlertTier.WARNING)  # info stays on the boards


# ---- recipients -----------------------------------------------------------------------------------------

def _team_leads(team_ids: Iterable[int]) -> dict[int, set[int]]:
    leads: dict[int, set[int]] = defaultdict(set)
    rows = Membership.objects.filter(team_id__in=set(team_ids), role=TeamRole.LEAD, user__is_active=True)
    for team_id, user_id in rows.values_list("team_id", "user_id"):
        leads[team_id].add(user_id)
    return leads


def _admins() -> set[int]:
    users = get_user_model().objects.filter(is_active=True).filter(Q(is_superuser=True) | Q(groups__name=ADMIN_GROUP))
    return set(users.values_list("pk", flat=True))


def alert_recipients(alerts: Iterable[Alert]) -> dict[int, set[int]]:
    """User ids per alert id: the team's leads for team and quota alerts, the booker for booking alerts,
    admins for node, GPU and job alerts (a job the usage cannot count), plus everyone subscribed."""
    alerts = list(alerts)
    ids_of: dict[str, set[int]] = defaultdict(set)
    for alert in alerts:
        ids_of[alert.subject_type].add(alert.subject_id)
    quota_team = dict(Quota.objects.filter(pk__in=ids_of[AlertSubject.QUOTA]).values_list("pk", "team_id"))
    leads = _team_leads({*ids_of[AlertSubject.TEAM], *quota_team.values()})
    booker = dict(Booking.objects.filter(pk__in=ids_of[AlertSubject.BOOKING]).values_list("pk", "booker_id"))
    admins = _admins() if ids_of[AlertSubject.NODE] or ids_of[AlertSubject.GPU] or ids_of[AlertSubject.JOB] else set()
    subscriptions = list(
        Subscription.objects.filter(subject_type__in=list(ids_of), user__is_active=True)
        .values_list("user_id", "subject_type", "subject_id", "kind")
    )
    out: dict[int, set[int]] = {}
    for alert in alerts:
        users: set[int] = set()
        if alert.subject_type == AlertSubject.TEAM:
            users |= leads.get(alert.subject_id, set())
        elif alert.subject_type == AlertSubject.QUOTA and alert.subject_id in quota_team:
            users |= leads.get(quota_team[alert.subject_id], set())
        elif alert.subject_type == AlertSubject.BOOKING and alert.subject_id in booker:
            users.add(booker[alert.subject_id])
        elif alert.subject_type in (AlertSubject.NODE, AlertSubject.GPU, AlertSubject.JOB):
            users |= admins
        users |= {
            user_id for user_id, subject_type, subject_id, kind in subscriptions
            if subject_type == alert.subject_type and subject_id in (None, alert.subject_id) and kind in ("", alert.kind)
        }
        out[alert.pk] = users
    return out


# ---- fan-out --------------------------------------------------------------------------------------------

def fan_out(*, now: datetime) -> dict:
    """Notify the recipients of warning and critical alerts opened in the look-back window that have no
    notifications yet, queue their webhook deliveries, and e-mail critical notifications not yet e-mailed."""
    since = now - timedelta(minutes=settings.NOTIFY_FANOUT_LOOKBACK_MINUTES)
    with transaction.atomic():
        alerts = list(
            Alert.objects.filter(opened_at__gte=since, opened_at__lte=now, tier__in=NOTIFIED_TIERS,
                                 notifications__isnull=True).order_by("pk")
        )
        recipients = alert_recipients(alerts)
        created = Notification.objects.bulk_create(
            [Notification(user_id=user_id, alert=alert, created_at=now)
             for alert in alerts for user_id in sorted(recipients[alert.pk])],
            ignore_conflicts=True,
        )
        delivery_ids = _queue_deliveries(alerts, now=now)
    emailed = email_critical(now=now, since=since)
    return {"alerts": len(alerts), "notifications": len(created), "deliveries": len(delivery_ids), "emailed": emailed}


def _queue_deliveries(alerts: list[Alert], *, now: datetime) -> list[int]:
    """One delivery per (alert, active endpoint admitting its tier); only new ones are queued."""
    endpoints = list(WebhookEndpoint.objects.filter(active=True))
    wanted = [(endpoint, alert) for alert in alerts for endpoint in endpoints if endpoint.admits(alert.tier)]
    if not wanted:
        return []
    existing = set(
        WebhookDelivery.objects.filter(alert__in=[alert for _e, alert in wanted]).values_list("endpoint_id", "alert_id")
    )
    new = WebhookDelivery.objects.bulk_create([
        WebhookDelivery(endpoint=endpoint, alert=alert, created_at=now)
        for endpoint, alert in wanted if (endpoint.pk, alert.pk) not in existing
    ])
    ids = [delivery.pk for delivery in new]
    if ids:
        transaction.on_commit(lambda: enqueue_deliveries(ids))
    return ids


def enqueue_deliveries(delivery_ids: Iterable[int]) -> None:
    """Queue the posts; with the broker away the deliveries stay pending and the sweeper posts them."""
    for delivery_id in delivery_ids:
        try:
            deliver_webhook.delay(delivery_id)
        except Exception as error:  # kombu's OperationalError, or whatever the transport raises
            log.warning("queueing webhook deliveries failed (%s); the sweeper posts them later", error)
            return


def email_critical(*, now: datetime, since: datetime) -> int:
    """E-mail each critical notification created since ``since`` that was not e-mailed yet, one by one:
    each is claimed (``emailed_at`` set) before it is sent, so a rerun never sends it twice."""
    pending = (
        Notification.objects.filter(emailed_at__isnull=True, created_at__gte=since, alert__tier=AlertTier.CRITICAL)
        .exclude(user__email="").select_related("user", "alert").order_by("pk")
    )
    sent = 0
    for notification in pending:
        if not Notification.objects.filter(pk=notification.pk, emailed_at__isnull=True).update(emailed_at=now):
            continue  # another run claimed it
        alert = notification.alert
        subject = _("[Cardhour] Critical: %(alert)s") % {"alert": f"{alert.get_kind_display()} · {alert.subject_label}"}
        try:
            send_mail(subject, _alert_lines(alert), None, [notification.user.email])
        except Exception:
            log.exception("e-mailing notification %s failed; it is tried again on the next run", notification.pk)
            Notification.objects.filter(pk=notification.pk).update(emailed_at=None)
            continue
        sent += 1
    return sent


def _alert_lines(alert: Alert) -> str:
    opened = timezone.localtime(alert.opened_at).strftime("%Y-%m-%d %H:%M")
    return f"{alert.get_tier_display()}: {alert.get_kind_display()} · {alert.subject_label}\n{alert.message}\n({opened})\n"


# ---- daily digest ---------------------------------------------------------------------------------------

def digest_time() -> time:
    hours, minutes = settings.NOTIFY_DIGEST_LOCAL_TIME.split(":")
    return time(int(hours), int(minutes))


def send_digests(*, now: datetime) -> int:
    """After the digest time of the local day (display zone), e-mail each person with warning
    notifications not yet e-mailed one digest listing them, once that day. Returns digests sent."""
    local = timezone.localtime(now, ZoneInfo(settings.TIME_ZONE))
    if local.time() < digest_time():
        return 0
    pending = (
        Notification.objects.filter(emailed_at__isnull=True, alert__tier=AlertTier.WARNING)
        .exclude(user__email="").exclude(user__is_active=False)
    )
    done_today = DigestSent.objects.filter(local_day=local.date()).values("user_id")
    user_ids = sorted(set(pending.exclude(user_id__in=done_today).values_list("user_id", flat=True)))
    sent = 0
    for user_id in user_ids:
        sent += _send_digest(user_id=user_id, local_day=local.date(), now=now, pending=pending)
    return sent


def _send_digest(*, user_id: int, local_day, now: datetime, pending) -> int:
    try:
        with transaction.atomic():
            # The day's mark is written first: a second run (or beat) finds it and sends nothing.
            mark = DigestSent.objects.create(user_id=user_id, local_day=local_day, sent_at=now, notification_count=0)
            rows = list(
                pending.filter(user_id=user_id).select_for_update(of=("self",)).select_related("alert", "user")
                .order_by("alert__opened_at", "pk")
            )
            if not rows:
                raise _Nothing
            user = rows[0].user
            subject = ngettext("[Cardhour] %(count)d warning", "[Cardhour] %(count)d warnings", len(rows)) % {
                "count": len(rows)
            }
            body = "\n".join(_alert_lines(row.alert) for row in rows)
            send_mail(subject, body, None, [user.email])
            Notification.objects.filter(pk__in=[row.pk for row in rows]).update(emailed_at=now)
            mark.notification_count = len(rows)
            mark.save(update_fields=["notification_count"])
    except (IntegrityError, _Nothing):
        return 0
    except Exception:
        log.exception("the digest for user %s failed; it is tried again on the next run", user_id)
        return 0
    return 1


class _Nothing(Exception):
    pass
