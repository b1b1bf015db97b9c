"""Closing a billing period (DESIGN.md §5): the month's usage, priced, written to the append-only ledger
under a statement; reopening it with a reason; closing it again books only reversals and new entries.

- Refused while the period's data is incomplete (a node not collected past the period's end, or the
  aggregates behind) or while usage has no price; the refusal lists what is missing.
- Closing a closed period returns its statement and adds nothing; two closes at once are serialised by
  an advisory lock (and the database allows one closed statement per period).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime

from django.conf import settings
from django.db import transaction
from django.db.models import Max, Sum
from django.utils import timezone
from django.utils.translation import gettext as _

from accounting.models import (
    ChargePolicy,
    DailyUsage,
    LedgerEntry,
    Statement,
    StatementStatus,
    UnallocatedPolicy,
    UsageAggregateState,
)
from accounting.money.priced_days import current_policy, priced_read, rate_cards
from accounting.money.pricing import (
    ENERGY,
    Entry,
    corrections,
    entries_of,
    share_unallocated,
    unpriced_of,
)
from accounting.quotas.rules import overflow_totals
from accounting.quotas.selectors import team_overflow
from accounting.usage.failures import usage_problems
from accounting.usage.selectors import data_complete_to
from accounting.usage.services import usage_process
from cluster.models import GpuModel, Node
from core.locks import wait_turn
from core.timeutils import business_day_bounds, month_days
from core.timewindow import OutsideWindow, check_date_in_window, window_message
from teams.audit.models import AuditKind
from teams.audit.records import audit_record, audit_values


class CloseRefused(Exception):
    """The period cannot be closed (or reopened); ``problems`` lists every reason."""

    def __init__(self, problems: Sequence[str]):
        super().__init__("; ".join(problems))
        self.problems = list(problems)


def parse_period(text: str) -> date:
    """``2026-11`` → 2026-11-01, a month in the supported time window; a clear error otherwise."""
    try:
        year, month = (int(part) for part in text.split("-"))
        first = date(year, month, 1)
    except (ValueError, TypeError):
        raise ValueError(_("A period is a month written YYYY-MM, e.g. 2026-11, not %(text)r.") % {"text": text}) from None
    try:
        return check_date_in_window(first, field="period")
    except OutsideWindow as error:
        raise ValueError(window_message(error)) from None


def current_unallocated_policy() -> str:
    row = ChargePolicy.objects.filter(id=1).first()
    return row.unallocated if row is not None else settings.CHARGE_UNALLOCATED


def period_unallocated(first: date, following: date) -> dict[tuple, int]:
    """Unallocated ticks per (day, GPU model): capacity nobody held (down time is not counted)."""
    rows = (
        DailyUsage.objects.filter(day__gte=first, day__lt=following, state="unallocated")
        .values_list("day", "gpu__model_id").annotate(total=Sum("ticks"))
    )
    return {(day, model_id): total for day, model_id, total in rows}


def completeness_problems(first: date, following: date, *, now: datetime) -> list[str]:
    """Why the month's data cannot be trusted yet (empty when it can)."""
    period_end = business_day_bounds(following)[0]
    problems = []
    if now < period_end:
        problems.append(_("the period has not ended yet (it ends %(end)s).") % {"end": period_end.isoformat()})
        return problems
    _cluster, per_node = data_complete_to(now=now)
    names = dict(Node.objects.filter(pk__in=list(per_node)).values_list("pk", "hostname"))
    for node_id, complete_to in sorted(per_node.items(), key=lambda item: names[item[0]]):
        if complete_to is None or complete_to < period_end:
            problems.append(_("node %(node)s: data complete only to %(to)s.") % {
                "node": names[node_id], "to": complete_to.isoformat() if complete_to else _("never collected")})
    state = UsageAggregateState.objects.filter(id=1).first()
    if state is None or state.aggregated_to is None or state.aggregated_to < period_end:
        problems.append(_("the usage aggregates are not up to date past the period's end."))
    problems += usage_problems(first, following)  # bad jobs, GPU-days that failed to aggregate
    return problems


def pricing_problems(unpriced: Sequence[tuple[int | None, date]]) -> list[str]:
    names = dict(GpuModel.objects.values_list("pk", "short_name"))
    by_model: dict[int | None, list[date]] = {}
    for model_id, day in unpriced:
        by_model.setdefault(model_id, []).append(day)
    problems = []
    for model_id, days in by_model.items():
        span = f"{min(days).isoformat()} – {max(days).isoformat()}"
        if model_id is None:
            problems.append(_("usage of jobs with no GPU model has no price (%(span)s).") % {"span": span})
        else:
            problems.append(_("%(model)s has no rate card for %(n)d day(s) with usage (%(span)s).") % {
                "model": names.get(model_id, model_id), "n": len(days), "span": span})
    return problems


def priced_entries(first: date, following: date, *, now: datetime) -> tuple[list[Entry], list[str]]:
    """The entries a close of the business days ``[first, following)`` wants booked, every team's, and the
    problems of usage with no price: the priced days (accounting/money/priced_days.py: usage at the rate cards
    and policy, energy at the tariff) with overflow beyond quotas split off, and shared unallocated capacity.
    No completeness checks and no refresh of the aggregates: :func:`close_period` does those; the priced usage
    report (accounting/money/statements.py), and through it the team page's month-to-date cost and the finance
    page, calls this as is, so every figure of a month's cost comes from here."""
    read = priced_read(first, following, now=now)

    def usage_totals(team_ids: list[int], since: date, until: date) -> dict[tuple, int]:
        """The quota teams' usage as the priced days hold it (the same keys and ticks as the daily rows)."""
        rows = read.rows if first <= since and until <= following else priced_read(since, until, now=now).rows
        wanted = set(team_ids)
        return {(row.day, row.team_id, row.gpu_model_id, row.project_id, row.kind): row.ticks for row in rows
                if row.kind != ENERGY and row.team_id in wanted and since <= row.day < until}

    overflow = overflow_totals(team_overflow(
        team_ids=read.team_ids, start=business_day_bounds(first)[0], end=business_day_bounds(following)[0], now=now,
        totals=usage_totals,
    ))
    wanted = entries_of([row for row in read.rows if row.kind != ENERGY], overflow=overflow, policy=current_policy())
    if current_unallocated_policy() == UnallocatedPolicy.SHARED:
        wanted += share_unallocated(unallocated=period_unallocated(first, following), entries=wanted,
                                    rates=rate_cards(first, following))
    wanted += entries_of([row for row in read.rows if row.kind == ENERGY])
    unpriced = unpriced_of(read.rows)
    return wanted, pricing_problems(unpriced) if unpriced else []


def _lock(period: date) -> None:
    wait_turn(f"cardhour.close.{period.isoformat()}")


def _as_entry(row: LedgerEntry) -> Entry:
    return Entry(row.day, row.team_id, row.project_id, row.gpu_model_id, row.kind, row.rate, row.rate_valid_from,
                 row.ticks)


@transaction.atomic
def close_period(*, period: date, user=None, now: datetime | None = None) -> Statement:
    """Close the month of ``period``: a statement whose ledger entries bring the period's booked usage
    to what it is now. Returns the closed statement (the existing one when already closed)."""
    now = now or timezone.now()
    first, following = month_days(period)
    _lock(first)
    closed = Statement.objects.filter(period=first, status=StatementStatus.CLOSED).first()
    if closed is not None:
        return closed
    usage_process(now=now, open_before=following)  # bring the period's aggregates up to now before reading them
    problems = completeness_problems(first, following, now=now)
    wanted, unpriced_problems = priced_entries(first, following, now=now)
    problems += unpriced_problems
    if problems:
        raise CloseRefused(problems)
    booked_rows = list(LedgerEntry.objects.filter(statement__period=first))
    reversals, fresh = corrections(booked=[_as_entry(row) for row in booked_rows], wanted=wanted)
    revision = (Statement.objects.filter(period=first).aggregate(top=Max("revision"))["top"] or 0) + 1
    statement = Statement.objects.create(
        period=first, revision=revision, status=StatementStatus.CLOSED, currency=settings.CARDHOUR_CURRENCY,
        closed_at=now, closed_by=user,
    )
    _record(statement, user=user, before=None, now=now)
    latest = {}
    for row in sorted(booked_rows, key=lambda r: r.pk):
        latest[_as_entry(row).key] = row
    LedgerEntry.objects.bulk_create(
        [_row(statement, entry, reverses=latest.get(entry.key)) for entry in reversals]
        + [_row(statement, entry) for entry in fresh],
        batch_size=5000,
    )
    return statement


def _row(statement: Statement, entry: Entry, *, reverses: LedgerEntry | None = None) -> LedgerEntry:
    return LedgerEntry(
        statement=statement, day=entry.day, team_id=entry.team_id, project_id=entry.project_id,
        gpu_model_id=entry.gpu_model_id, kind=entry.kind, rate=entry.rate, rate_valid_from=entry.rate_valid_from,
        ticks=entry.ticks, reverses=reverses,
    )


@transaction.atomic
def reopen_period(*, period: date, user, reason: str, now: datetime | None = None) -> Statement:
    """Reopen a closed month (finance or admin, with a reason); its ledger entries stay, and the next
    close books only what changed."""
    from teams.roles import is_admin, is_finance

    if not (is_admin(user) or is_finance(user)):
        raise CloseRefused([_("only finance or an admin reopens a period.")])
    if not reason.strip():
        raise CloseRefused([_("reason: say why the period is reopened.")])
    first, _following = month_days(period)
    _lock(first)
    closed = Statement.objects.select_for_update().filter(period=first, status=StatementStatus.CLOSED).first()
    if closed is None:
        raise CloseRefused([_("%(period)s is not closed.") % {"period": first.strftime("%Y-%m")}])
    before = audit_values(closed)
    now = now or timezone.now()
    closed.status = StatementStatus.REOPENED
    closed.reopened_at, closed.reopened_by, closed.reopen_reason = now, user, reason.strip()
    closed.save(update_fields=["status", "reopened_at", "reopened_by", "reopen_reason"])
    _record(closed, user=user, before=before, now=now)
    return closed


def _record(statement: Statement, *, user, before: dict | None, now: datetime) -> None:
    """The audit row of a close (a new statement) or a reopening, in the same transaction."""
    audit_record(kind=AuditKind.PERIOD, user=user, object_id=statement.pk, now=now, before=before,
                 after=audit_values(statement),
                 subject=f"period {statement.period:%Y-%m} {statement.status} (revision {statement.revision})")

