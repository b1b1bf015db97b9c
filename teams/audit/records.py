"""Writing the audit trail: :func:`audit_record` inside the change's own transaction, so a change and its
row commit together or not at all; :func:`audit_values` turns a row into the JSON the trail keeps.

Who: the person (``user``), else the process acting (:func:`acting_as`: a Celery task sets its name, a
``manage.py`` command is ``command:<name>``), else ``system``. When: ``now`` when the caller has one,
else the application's clock (``timezone.now()``, aware UTC; never the database's ``now()``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path

from django.db import connection, models
from django.utils import timezone

from teams.audit.models import AuditEntry

SYSTEM = "system"
_acting: ContextVar[str | None] = ContextVar("cardhour_audit_actor", default=None)
SUBJECT_LENGTH = AuditEntry._meta.get_field("subject").max_length


def begin_acting(name: str) -> Token:
    """From now on, changes made without a person are recorded as made by ``name``; undo with :func:`end_acting`."""
    return _acting.set(name)


def end_acting(token: Token) -> None:
    _acting.reset(token)


@contextmanager
def acting_as(name: str) -> Iterator[None]:
    """Changes made without a person inside the block are recorded as made by ``name`` (a task's name)."""
    token = begin_acting(name)
    try:
        yield
    finally:
        end_acting(token)


def current_actor(user=None) -> str:
    """The name recorded for a change by ``user`` (None: the process acting, else ``system``)."""
    if user is not None and getattr(user, "is_authenticated", False):
        return user.get_username()
    acting = _acting.get()
    if acting:
        return acting
    if len(sys.argv) > 1 and Path(sys.argv[0]).name == "manage.py":
        return f"command:{sys.argv[1]}"
    return SYSTEM


def _plain(instance: models.Model, field: models.Field):
    value = getattr(instance, field.attname)
    if value is None:
        return None
    if field.is_relation:
        related = getattr(instance, field.name)
        for name in ("short_name", "slug", "hostname"):
            if getattr(related, name, None):
                return getattr(related, name)
        return related.get_username() if hasattr(related, "get_username") else str(related)
    if isinstance(field, models.DecimalField):
        return str(Decimal(value).quantize(Decimal(1).scaleb(-field.decimal_places)))
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat() if timezone.is_aware(value) else value.isoformat()
    if isinstance(value, date | time):  # a time of day (a guarantee's hours) has no zone: kept as written
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def audit_values(instance: models.Model, *, exclude: Iterable[str] = ()) -> dict:
    """The row's editable values as JSON: related rows by short name, slug, hostname or username,
    Decimals as strings at the field's places, dates and times ISO (times in UTC)."""
    skip = set(exclude)
    return {field.name: _plain(instance, field) for field in instance._meta.concrete_fields
            if field.editable and not field.primary_key and field.name not in skip}


def subject_of(text: str) -> str:
    """``text`` cut to the subject's length."""
    return text if len(text) <= SUBJECT_LENGTH else text[:SUBJECT_LENGTH - 1] + "…"


def audit_entry(*, kind: str, subject: str, before: dict | None, after: dict | None, user=None,
                object_id: int | None = None, team_id: int | None = None, now: datetime | None = None) -> AuditEntry:
    """An unsaved audit row (for :func:`audit_record_many`)."""
    changed_at = now or timezone.now()
    if timezone.is_naive(changed_at):
        raise ValueError("an audit time must be aware (UTC)")
    person = user if user is not None and getattr(user, "is_authenticated", False) else None
    return AuditEntry(
        changed_at=changed_at.astimezone(UTC), changed_by=person, actor=current_actor(person), kind=kind,
        object_id=object_id, team_id=team_id, subject=subject_of(subject), before=before, after=after,
    )


def _in_transaction() -> None:
    if not connection.in_atomic_block:
        raise RuntimeError("an audit row is written in the change's own transaction: call it inside one")


def audit_record(*, kind: str, subject: str, before: dict | None, after: dict | None, user=None,
                 object_id: int | None = None, team_id: int | None = None,
                 now: datetime | None = None) -> AuditEntry | None:
    """Record one change (nothing when ``before == after``); must run inside the change's transaction."""
    _in_transaction()
    if before == after:
        return None
    entry = audit_entry(kind=kind, subject=subject, before=before, after=after, user=user, object_id=object_id,
                        team_id=team_id, now=now)
    entry.save(force_insert=True)
    return entry


def audit_record_many(entries: list[AuditEntry]) -> None:
    """Record several changes at once (a periodic task's), inside their transaction."""
    _in_transaction()
    AuditEntry.objects.bulk_create([entry for entry in entries if entry.before != entry.after])
