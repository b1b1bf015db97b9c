"""Writes to node status and alerts: one transaction each, safe to call again with the same facts."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from cluster.choices import AlertSubject
from cluster.models import Alert, Node, NodeStatusPeriod
from cluster.status.models import MESSAGE_IN


@transaction.atomic
def node_status_set(*, node: Node, status: str, at: datetime | None = None, reason: str = "") -> bool:
    """Give ``node`` a new status from ``at`` on, closing the open period of the history.

    Returns whether anything changed (setting the current status again only refreshes the reason)."""
    at = at or timezone.now()
    current = NodeStatusPeriod.objects.select_for_update().filter(node=node, ended_at__isnull=True).first()
    if current is not None and current.status == status:
        if reason and reason != current.reason:
            NodeStatusPeriod.objects.filter(pk=current.pk).update(reason=reason)
        if node.status != status:
            Node.objects.filter(pk=node.pk).update(status=status)
            node.status = status
        return False
    if current is not None:
        current.ended_at = max(at, current.started_at)
        current.save(update_fields=["ended_at"])
    NodeStatusPeriod.objects.create(node=node, status=status, started_at=at, reason=reason)
    Node.objects.filter(pk=node.pk).update(status=status)
    node.status = status
    return True


def alert_raise(
    *, subject_type: str, subject_id: int, subject_label: str, kind: str, tier: str, message: str | dict[str, str],
    details: dict | None = None, at: datetime | None = None, keep_message: bool = False,
) -> tuple[Alert, bool]:
    """Open an episode of ``kind`` on the subject, or refresh the open one (when it was last seen; its
    message and details too, unless ``keep_message``: an alert that says what it was when it opened, such
    as a quota's crossing). ``message`` is a text, or one per language (``core.languages.in_every_language``:
    the alert keeps them all and shows each reader theirs, ``Alert.text``). Returns (alert, opened)."""
    at = at or timezone.now()
    if isinstance(message, dict):
        details = {**(details or {}), MESSAGE_IN: message}
        message = message.get(settings.LANGUAGE_CODE) or next(iter(message.values()))
    for _attempt in range(2):
        try:
            with transaction.atomic():
                alert = Alert.objects.select_for_update().open().about(subject_type, subject_id).filter(kind=kind).first()
                if alert is not None:
                    alert.last_seen_at = max(at, alert.last_seen_at)
                    if keep_message:
                        alert.save(update_fields=["last_seen_at"])
                        return alert, False
                    alert.message = message
                    alert.details = details or alert.details
                    alert.save(update_fields=["last_seen_at", "message", "details"])
                    return alert, False
                alert = Alert.objects.create(
                    subject_type=subject_type, subject_id=subject_id, subject_label=subject_label, kind=kind,
                    tier=tier, message=message, details=details or {}, opened_at=at, last_seen_at=at,
                )
                return alert, True
        except IntegrityError:
            # Another process opened the same episode between our read and insert: refresh that one.
            continue
    raise RuntimeError("could not open or refresh the alert episode")


def alert_close(
    *, subject_type: str, subject_id: int, kind: str | None = None, kinds: tuple[str, ...] = (),
    at: datetime | None = None,
) -> int:
    """Close the open episodes of ``kind`` (or of any of ``kinds``) on the subject, in one statement.
    Returns how many were closed."""
    at = at or timezone.now()
    wanted = (kind, *kinds) if kind else kinds
    return Alert.objects.open().about(subject_type, subject_id).filter(kind__in=wanted).update(closed_at=at)


def node_alert_raise(node: Node, *, kind: str, tier: str, message: str, at: datetime | None = None) -> tuple[Alert, bool]:
    return alert_raise(
        subject_type=AlertSubject.NODE, subject_id=node.pk, subject_label=node.hostname, kind=kind, tier=tier,
        message=message, at=at,
    )
