"""Writes to what money is priced with (DESIGN.md §5, §6): rate cards, energy tariffs, the charge policy
and quotas, and the rules each checks (required fields, the supported window, no overlapping validity).

How a write is carried out is accounting/money/changes.py's: admin and finance only, one transaction,
a ``ValidationError`` of ``{field: message}`` naming the rule, a racing writer refused by the exclusion
constraint with the same message, and an audit row (teams.audit) recording the values before and after.
Changing or deleting a rate card or tariff that a closed statement priced is allowed (reopening and
closing the period again books the difference); the audit subject says which closed periods it priced.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils.translation import gettext as _

from accounting.models import (
    ChargePolicy,
    EnergyTariff,
    LedgerEntry,
    LedgerKind,
    Quota,
    RateCard,
    StatementStatus,
    UnallocatedPolicy,
)
from accounting.money.changes import (
    change_subject,
    change_values,
    check_validity,
    check_window,
    configured_currency,
    locked_for_change,
    not_negative,
    raise_problems,
    record_change,
    require_writer,
    save_guarded,
    validate_fields,
)
from teams.audit.models import AuditKind

# ---- rate cards ------------------------------------------------------------------------------------------

@transaction.atomic
def rate_card_save(*, user, gpu_model, valid_from: date, valid_until: date | None, price_per_card_hour,
                   currency: str | None = None, card: RateCard | None = None) -> RateCard:
    """Create a rate card, or change ``card``: the price of one card-hour of ``gpu_model`` over the
    business days ``[valid_from, valid_until)`` (``valid_until`` None: until further notice), in the
    configured currency."""
    require_writer(user)
    card, before = locked_for_change(RateCard, card)
    spans = [] if before is None else [(card.gpu_model_id, card.valid_from, card.valid_until)]
    problems: dict[str, str] = {}
    if gpu_model is None:
        problems["gpu_model"] = _("is required.")
    check_validity(problems, valid_from, valid_until)
    price = not_negative(problems, "price_per_card_hour", price_per_card_hour)
    currency = configured_currency(problems, currency, _(
        "rate cards are in the configured currency %(configured)s, not %(code)s."))
    if not problems.keys() & {"gpu_model", "valid_from", "valid_until"}:
        others = RateCard.objects.filter(gpu_model=gpu_model).exclude(pk=card.pk)
        _check_overlap(problems, "valid_from", _overlapping(others, valid_from, valid_until), _rate_card_overlap)
    raise_problems(problems)
    card.gpu_model, card.valid_from, card.valid_until = gpu_model, valid_from, valid_until
    card.price_per_card_hour, card.currency = price, currency
    validate_fields(card)

    def conflict():
        return {"valid_from": _rate_card_overlap(_overlapping(
            RateCard.objects.filter(gpu_model=gpu_model).exclude(pk=card.pk), valid_from, valid_until))}

    save_guarded(card, constraint="rate_card_no_overlap", conflict=conflict)
    spans.append((card.gpu_model_id, card.valid_from, card.valid_until))
    card.closed_periods = _closed_periods_priced(spans)
    record_change(user=user, kind=AuditKind.RATE_CARD, instance=card,
                  subject=_rate_card_subject(card, card.closed_periods), before=before, after=change_values(card))
    return card


@transaction.atomic
def rate_card_delete(*, user, card: RateCard) -> None:
    require_writer(user)
    card, before = locked_for_change(RateCard, card)
    periods = _closed_periods_priced([(card.gpu_model_id, card.valid_from, card.valid_until)])
    subject, pk = _rate_card_subject(card, periods), card.pk
    card.delete()
    card.pk = pk
    record_change(user=user, kind=AuditKind.RATE_CARD, instance=card, subject=subject, before=before, after=None)


def _rate_card_subject(card: RateCard, closed_periods: list[str]) -> str:
    return change_subject(f"rate card {card.pk} ({card.gpu_model.short_name})", closed_periods)


def _rate_card_overlap(other: RateCard | None) -> str:
    if other is None:
        return _("overlaps another rate card of this GPU model.")
    return _("overlaps the rate card valid %(span)s for %(model)s.") % {
        "span": _span(other.valid_from, other.valid_until), "model": other.gpu_model.short_name}


# ---- energy tariffs --------------------------------------------------------------------------------------

@transaction.atomic
def energy_tariff_save(*, user, valid_from: date, valid_until: date | None, price_per_kwh,
                       currency: str | None = None, tariff: EnergyTariff | None = None) -> EnergyTariff:
    """Create an energy tariff, or change ``tariff``: the price of one kWh over ``[valid_from, valid_until)``."""
    require_writer(user)
    tariff, before = locked_for_change(EnergyTariff, tariff)
    spans = [] if before is None else [(None, tariff.valid_from, tariff.valid_until)]
    problems: dict[str, str] = {}
    check_validity(problems, valid_from, valid_until)
    price = not_negative(problems, "price_per_kwh", price_per_kwh)
    currency = configured_currency(problems, currency, _(
        "energy tariffs are in the configured currency %(configured)s, not %(code)s."))
    if not problems.keys() & {"valid_from", "valid_until"}:
        others = EnergyTariff.objects.exclude(pk=tariff.pk)
        _check_overlap(problems, "valid_from", _overlapping(others, valid_from, valid_until), _tariff_overlap)
    raise_problems(problems)
    tariff.valid_from, tariff.valid_until, tariff.price_per_kwh, tariff.currency = (
        valid_from, valid_until, price, currency)
    validate_fields(tariff)

    def conflict():
        return {"valid_from": _tariff_overlap(_overlapping(
            EnergyTariff.objects.exclude(pk=tariff.pk), valid_from, valid_until))}

    save_guarded(tariff, constraint="energy_tariff_no_overlap", conflict=conflict)
    spans.append((None, tariff.valid_from, tariff.valid_until))
    tariff.closed_periods = _closed_periods_priced(spans)
    record_change(user=user, kind=AuditKind.ENERGY_TARIFF, instance=tariff,
                  subject=change_subject(f"energy tariff {tariff.pk}", tariff.closed_periods),
                  before=before, after=change_values(tariff))
    return tariff


@transaction.atomic
def energy_tariff_delete(*, user, tariff: EnergyTariff) -> None:
    require_writer(user)
    tariff, before = locked_for_change(EnergyTariff, tariff)
    subject = change_subject(f"energy tariff {tariff.pk}",
                             _closed_periods_priced([(None, tariff.valid_from, tariff.valid_until)]))
    pk = tariff.pk
    tariff.delete()
    tariff.pk = pk
    record_change(user=user, kind=AuditKind.ENERGY_TARIFF, instance=tariff, subject=subject, before=before, after=None)


def _tariff_overlap(other: EnergyTariff | None) -> str:
    if other is None:
        return _("overlaps another energy tariff.")
    return _("overlaps the energy tariff valid %(span)s.") % {"span": _span(other.valid_from, other.valid_until)}


# ---- the charge policy -----------------------------------------------------------------------------------

def policy_defaults() -> dict:
    """The charge policy the settings give, in force until admin or finance first change it."""
    return {
        "idle_charge_factor": Decimal(settings.CHARGE_IDLE_FACTOR),
        "overflow_multiplier": Decimal(settings.CHARGE_OVERFLOW_MULTIPLIER),
        "unallocated": settings.CHARGE_UNALLOCATED,
    }


@transaction.atomic
def policy_update(*, user, idle_charge_factor=None, overflow_multiplier=None,
                  unallocated: str | None = None) -> ChargePolicy:
    """Change the charge policy (None leaves a value as it is). The first change creates the one row
    from the settings' defaults; its ``before`` holds those defaults."""
    require_writer(user)
    ChargePolicy.objects.get_or_create(id=1, defaults=policy_defaults())
    policy = ChargePolicy.objects.select_for_update().get(id=1)
    before = change_values(policy)
    problems: dict[str, str] = {}
    if idle_charge_factor is not None:
        policy.idle_charge_factor = not_negative(problems, "idle_charge_factor", idle_charge_factor)
    if overflow_multiplier is not None:
        policy.overflow_multiplier = not_negative(problems, "overflow_multiplier", overflow_multiplier)
    if unallocated is not None:
        if unallocated not in UnallocatedPolicy.values:
            problems["unallocated"] = _("must be kept or shared.")
        policy.unallocated = unallocated
    raise_problems(problems)
    validate_fields(policy)
    policy.save()
    record_change(user=user, kind=AuditKind.CHARGE_POLICY, instance=policy, subject="charge policy", before=before,
                  after=change_values(policy))
    return policy


# ---- quotas ----------------------------------------------------------------------------------------------

@transaction.atomic
def quota_save(*, user, team, gpu_model, period_start: date, expires: date, card_hours,
               quota: Quota | None = None) -> Quota:
    """Create a quota, or change ``quota``: ``card_hours`` for ``team`` (of ``gpu_model``, or of every model
    when None) over the business days ``[period_start, expires)``."""
    require_writer(user)
    quota, before = locked_for_change(Quota, quota)
    problems: dict[str, str] = {}
    if team is None:
        problems["team"] = _("is required.")
    for field, value in (("period_start", period_start), ("expires", expires)):
        if value is None:
            problems[field] = _("is required.")
        else:
            check_window(problems, field, value)
    if "period_start" not in problems and "expires" not in problems and expires <= period_start:
        problems["expires"] = _("must be after the start (period_start).")
    hours = not_negative(problems, "card_hours", card_hours)
    if not problems.keys() & {"team", "period_start", "expires"}:
        _check_overlap(problems, "period_start", _quota_overlapping(quota, team, gpu_model, period_start, expires),
                       _quota_overlap)
    raise_problems(problems)
    quota.team, quota.gpu_model, quota.period_start, quota.expires, quota.card_hours = (
        team, gpu_model, period_start, expires, hours)
    validate_fields(quota)

    def conflict():
        return {"period_start": _quota_overlap(_quota_overlapping(quota, team, gpu_model, period_start, expires))}

    save_guarded(quota, constraint="quota_no_overlap", conflict=conflict)
    record_change(user=user, kind=AuditKind.QUOTA, instance=quota, team_id=quota.team_id,
                  subject=_quota_subject(quota), before=before, after=change_values(quota))
    return quota


@transaction.atomic
def quota_delete(*, user, quota: Quota) -> None:
    require_writer(user)
    quota, before = locked_for_change(Quota, quota)
    subject, pk = _quota_subject(quota), quota.pk
    quota.delete()
    quota.pk = pk
    record_change(user=user, kind=AuditKind.QUOTA, instance=quota, team_id=quota.team_id, subject=subject,
                  before=before, after=None)


def _quota_overlapping(quota: Quota, team, gpu_model, period_start: date, expires: date) -> Quota | None:
    others = Quota.objects.filter(team=team, gpu_model=gpu_model).exclude(pk=quota.pk).select_related("team")
    return _overlapping(others, period_start, expires, start="period_start", end="expires")


def _quota_overlap(other: Quota | None) -> str:
    if other is None:
        return _("overlaps another quota of this team and GPU model.")
    span = _span(other.period_start, other.expires)
    if other.gpu_model_id is None:
        return _("overlaps the team-wide quota %(span)s of %(team)s.") % {"span": span, "team": other.team.name}
    return _("overlaps the quota %(span)s of %(team)s for %(model)s.") % {
        "span": span, "team": other.team.name, "model": other.gpu_model.short_name}


def _quota_subject(quota: Quota) -> str:
    return change_subject(f"quota {quota.pk} ({quota.team.name})", [])


# ---- overlapping validity, closed periods priced ---------------------------------------------------------

def _overlapping(queryset, first: date, following: date | None, *, start="valid_from", end="valid_until"):
    """The earliest row of ``queryset`` whose ``[start, end)`` overlaps ``[first, following)`` (None: open)."""
    rows = queryset.filter(Q(**{f"{end}__isnull": True}) | Q(**{f"{end}__gt": first}))
    if following is not None:
        rows = rows.filter(**{f"{start}__lt": following})
    return rows.order_by(start).first()


def _check_overlap(problems: dict, field: str, other, message: Callable) -> None:
    if other is not None:
        problems[field] = message(other)


def _span(first: date, following: date | None) -> str:
    if following is None:
        return _("%(start)s – (open-ended)") % {"start": first.isoformat()}
    return f"{first.isoformat()} – {following.isoformat()}"


def _closed_periods_priced(spans: list[tuple[int | None, date, date | None]]) -> list[str]:
    """The closed periods (``YYYY-MM``) with ledger entries of a GPU model (None: energy) on the days of
    ``spans`` [(gpu_model_id, first, following)]: the statements a price change there leaves behind."""
    which = Q()
    for model_id, first, following in spans:
        days = Q(day__gte=first) if following is None else Q(day__gte=first, day__lt=following)
        which |= days & (Q(kind=LedgerKind.ENERGY) if model_id is None
                         else Q(gpu_model_id=model_id) & ~Q(kind=LedgerKind.ENERGY))
    periods = (LedgerEntry.objects.filter(which, statement__status=StatementStatus.CLOSED)
               .values_list("statement__period", flat=True).distinct().order_by("statement__period"))
    return [period.strftime("%Y-%m") for period in periods]
