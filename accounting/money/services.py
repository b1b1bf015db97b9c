"""Writes to what money is priced with (DESIGN.md §5, §6): rate cards, energy tariffs, the charge policy
and quotas.

Each service runs in one transaction, is open to admin and finance only (``PermissionDenied`` otherwise),
refuses bad input with a ``ValidationError`` of ``{field: message}`` whose message names the rule, and
records the change as a ``MoneyChange`` row: who, when, what, and the values before and after (JSON:
Decimals as strings, dates ISO; ``before`` is null for a creation, ``after`` for a deletion).

The exclusion constraints are the guard against overlapping validity, whatever path writes; the services
check first only to answer with a clear message, and turn the constraint's refusal (a concurrent writer
won) into the same error. Changing or deleting a rate card or tariff that a closed statement priced is
allowed (reopening and closing the period again books the difference); the audit subject says which
closed periods it priced.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, OperationalError, models, transaction
from django.db.models import Q
from django.utils.translation import gettext as _

from accounting.models import (
    ChargePolicy,
    EnergyTariff,
    LedgerEntry,
    LedgerKind,
    MoneyChange,
    Quota,
    RateCard,
    StatementStatus,
    UnallocatedPolicy,
)
from core.money import currency_validator
from core.timewindow import OutsideWindow, check_date_in_window, window_message
from teams.roles import is_admin, is_finance

EXCLUSION_VIOLATION = "23P01"
DEADLOCK_DETECTED = "40P01"
WRITE_ATTEMPTS = 3
SUBJECT_LENGTH = MoneyChange._meta.get_field("subject").max_length


# ---- rate cards ------------------------------------------------------------------------------------------

@transaction.atomic
def rate_card_save(*, user, gpu_model, valid_from: date, valid_until: date | None, price_per_card_hour,
                   currency: str | None = None, card: RateCard | None = None) -> RateCard:
    """Create a rate card, or change ``card``: the price of one card-hour of ``gpu_model`` over the
    business days ``[valid_from, valid_until)`` (``valid_until`` None: until further notice), in the
    configured currency."""
    _require_writer(user)
    card, before = _locked(RateCard, card)
    spans = [] if before is None else [(card.gpu_model_id, card.valid_from, card.valid_until)]
    problems: dict[str, str] = {}
    if gpu_model is None:
        problems["gpu_model"] = _("is required.")
    _check_validity(problems, valid_from, valid_until)
    price = _not_negative(problems, "price_per_card_hour", price_per_card_hour)
    currency = _configured_currency(problems, currency, _(
        "rate cards are in the configured currency %(configured)s, not %(code)s."))
    if not problems.keys() & {"gpu_model", "valid_from", "valid_until"}:
        others = RateCard.objects.filter(gpu_model=gpu_model).exclude(pk=card.pk)
        _check_overlap(problems, "valid_from", _overlapping(others, valid_from, valid_until), _rate_card_overlap)
    _raise(problems)
    card.gpu_model, card.valid_from, card.valid_until = gpu_model, valid_from, valid_until
    card.price_per_card_hour, card.currency = price, currency
    _validate_fields(card)

    def conflict():
        return {"valid_from": _rate_card_overlap(_overlapping(
            RateCard.objects.filter(gpu_model=gpu_model).exclude(pk=card.pk), valid_from, valid_until))}

    _save_guarded(card, constraint="rate_card_no_overlap", conflict=conflict)
    spans.append((card.gpu_model_id, card.valid_from, card.valid_until))
    card.closed_periods = _closed_periods_priced(spans)
    _record(user=user, subject=_rate_card_subject(card, card.closed_periods), before=before,
            after=_values(card))
    return card


@transaction.atomic
def rate_card_delete(*, user, card: RateCard) -> None:
    _require_writer(user)
    card, before = _locked(RateCard, card)
    periods = _closed_periods_priced([(card.gpu_model_id, card.valid_from, card.valid_until)])
    subject = _rate_card_subject(card, periods)
    card.delete()
    _record(user=user, subject=subject, before=before, after=None)


def _rate_card_subject(card: RateCard, closed_periods: list[str]) -> str:
    return _subject(f"rate card {card.pk} ({card.gpu_model.short_name})", closed_periods)


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
    _require_writer(user)
    tariff, before = _locked(EnergyTariff, tariff)
    spans = [] if before is None else [(None, tariff.valid_from, tariff.valid_until)]
    problems: dict[str, str] = {}
    _check_validity(problems, valid_from, valid_until)
    price = _not_negative(problems, "price_per_kwh", price_per_kwh)
    currency = _configured_currency(problems, currency, _(
        "energy tariffs are in the configured currency %(configured)s, not %(code)s."))
    if not problems.keys() & {"valid_from", "valid_until"}:
        others = EnergyTariff.objects.exclude(pk=tariff.pk)
        _check_overlap(problems, "valid_from", _overlapping(others, valid_from, valid_until), _tariff_overlap)
    _raise(problems)
    tariff.valid_from, tariff.valid_until, tariff.price_per_kwh, tariff.currency = (
        valid_from, valid_until, price, currency)
    _validate_fields(tariff)

    def conflict():
        return {"valid_from": _tariff_overlap(_overlapping(
            EnergyTariff.objects.exclude(pk=tariff.pk), valid_from, valid_until))}

    _save_guarded(tariff, constraint="energy_tariff_no_overlap", conflict=conflict)
    spans.append((None, tariff.valid_from, tariff.valid_until))
    tariff.closed_periods = _closed_periods_priced(spans)
    _record(user=user, subject=_subject(f"energy tariff {tariff.pk}", tariff.closed_periods), before=before,
            after=_values(tariff))
    return tariff


@transaction.atomic
def energy_tariff_delete(*, user, tariff: EnergyTariff) -> None:
    _require_writer(user)
    tariff, before = _locked(EnergyTariff, tariff)
    subject = _subject(f"energy tariff {tariff.pk}",
                       _closed_periods_priced([(None, tariff.valid_from, tariff.valid_until)]))
    tariff.delete()
    _record(user=user, subject=subject, before=before, after=None)


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
    _require_writer(user)
    ChargePolicy.objects.get_or_create(id=1, defaults=policy_defaults())
    policy = ChargePolicy.objects.select_for_update().get(id=1)
    before = _values(policy)
    problems: dict[str, str] = {}
    if idle_charge_factor is not None:
        policy.idle_charge_factor = _not_negative(problems, "idle_charge_factor", idle_charge_factor)
    if overflow_multiplier is not None:
        policy.overflow_multiplier = _not_negative(problems, "overflow_multiplier", overflow_multiplier)
    if unallocated is not None:
        if unallocated not in UnallocatedPolicy.values:
            problems["unallocated"] = _("must be kept or shared.")
        policy.unallocated = unallocated
    _raise(problems)
    _validate_fields(policy)
    policy.save()
    _record(user=user, subject="charge policy", before=before, after=_values(policy))
    return policy


# ---- quotas ----------------------------------------------------------------------------------------------

@transaction.atomic
def quota_save(*, user, team, gpu_model, period_start: date, expires: date, card_hours,
               quota: Quota | None = None) -> Quota:
    """Create a quota, or change ``quota``: ``card_hours`` for ``team`` (of ``gpu_model``, or of every model
    when None) over the business days ``[period_start, expires)``."""
    _require_writer(user)
    quota, before = _locked(Quota, quota)
    problems: dict[str, str] = {}
    if team is None:
        problems["team"] = _("is required.")
    for field, value in (("period_start", period_start), ("expires", expires)):
        if value is None:
            problems[field] = _("is required.")
        else:
            _check_window(problems, field, value)
    if "period_start" not in problems and "expires" not in problems and expires <= period_start:
        problems["expires"] = _("must be after the start (period_start).")
    hours = _not_negative(problems, "card_hours", card_hours)
    if not problems.keys() & {"team", "period_start", "expires"}:
        _check_overlap(problems, "period_start", _quota_overlapping(quota, team, gpu_model, period_start, expires),
                       _quota_overlap)
    _raise(problems)
    quota.team, quota.gpu_model, quota.period_start, quota.expires, quota.card_hours = (
        team, gpu_model, period_start, expires, hours)
    _validate_fields(quota)

    def conflict():
        return {"period_start": _quota_overlap(_quota_overlapping(quota, team, gpu_model, period_start, expires))}

    _save_guarded(quota, constraint="quota_no_overlap", conflict=conflict)
    _record(user=user, subject=_quota_subject(quota), before=before, after=_values(quota))
    return quota


@transaction.atomic
def quota_delete(*, user, quota: Quota) -> None:
    _require_writer(user)
    quota, before = _locked(Quota, quota)
    subject = _quota_subject(quota)
    quota.delete()
    _record(user=user, subject=subject, before=before, after=None)


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
    return _subject(f"quota {quota.pk} ({quota.team.name})", [])


# ---- shared ----------------------------------------------------------------------------------------------

def _require_writer(user) -> None:
    if user is None or not (is_admin(user) or is_finance(user)):
        raise PermissionDenied(_("Only admin and finance change rate cards, energy tariffs, the charge policy "
                                 "and quotas."))


def _locked(model: type[models.Model], instance):
    """(the row locked for the change, its values before) or (a new instance, None)."""
    if instance is None or instance.pk is None:
        return model(), None
    related = [field.name for field in model._meta.concrete_fields if field.is_relation]
    rows = model.objects.select_for_update(of=("self",))
    row = (rows.select_related(*related) if related else rows).get(pk=instance.pk)
    return row, _values(row)


def _check_validity(problems: dict, valid_from, valid_until) -> None:
    if valid_from is None:
        problems["valid_from"] = _("is required.")
    _check_window(problems, "valid_from", valid_from)
    _check_window(problems, "valid_until", valid_until)
    if valid_from is not None and valid_until is not None and valid_until <= valid_from:
        problems.setdefault("valid_until", _(
            "must be after valid_from (it is the first day no longer covered), or empty."))


def _check_window(problems: dict, field: str, day) -> None:
    """A day outside the supported time window (core.timewindow) is a problem of ``field``."""
    try:
        check_date_in_window(day, field=field)
    except OutsideWindow as error:
        problems[field] = window_message(error)


def _not_negative(problems: dict, field: str, value) -> Decimal | None:
    if value is None or value == "":
        problems[field] = _("is required.")
        return None
    try:
        number = value if isinstance(value, Decimal) else Decimal(str(value))
    except InvalidOperation:
        number = None
    if number is None or not number.is_finite():
        problems[field] = _("must be a number.")
        return None
    if number < 0:
        problems[field] = _("must be zero or more.")
    return number


def _configured_currency(problems: dict, code: str | None, other_message: str) -> str:
    """The configured currency when ``code`` is empty; ``code`` otherwise, with a problem unless it is that one."""
    configured = settings.CARDHOUR_CURRENCY
    if not code:
        return configured
    if code != configured:
        try:
            currency_validator(code)
        except ValidationError as exc:
            problems["currency"] = exc.messages[0]
        else:
            problems["currency"] = other_message % {"configured": configured, "code": code}
    return code


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


def _raise(problems: dict) -> None:
    if problems:
        raise ValidationError(problems)


def _validate_fields(instance: models.Model) -> None:
    """The model's own field checks (digits, lengths) after the rules above; the constraints are the database's."""
    instance.full_clean(validate_unique=False, validate_constraints=False)


def _save_guarded(instance: models.Model, *, constraint: str, conflict: Callable[[], dict]) -> None:
    """Save ``instance`` in a savepoint; when ``constraint`` (an exclusion constraint) refuses it because a
    concurrent writer got there first, raise ``conflict()`` as the ValidationError the check before would
    have. Two inserts checking an exclusion constraint at once can deadlock; PostgreSQL aborts one, which
    tries again and then waits for the other."""
    for attempt in range(WRITE_ATTEMPTS):
        try:
            with transaction.atomic():
                instance.save()
            return
        except (IntegrityError, OperationalError) as exc:
            cause = exc.__cause__
            state = getattr(cause, "sqlstate", None)
            if state == DEADLOCK_DETECTED and attempt + 1 < WRITE_ATTEMPTS:
                continue
            diag = getattr(cause, "diag", None)
            if state == EXCLUSION_VIOLATION and getattr(diag, "constraint_name", None) == constraint:
                raise ValidationError(conflict()) from exc
            raise


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


def _subject(what: str, closed_periods: list[str]) -> str:
    if not closed_periods:
        return what
    subject = f"{what}; priced closed {', '.join(closed_periods)}"
    return subject if len(subject) <= SUBJECT_LENGTH else subject[:SUBJECT_LENGTH - 1] + "…"


def _plain(instance: models.Model, field: models.Field):
    value = getattr(instance, field.attname)
    if value is None:
        return None
    if field.is_relation:
        related = getattr(instance, field.name)
        return getattr(related, "short_name", None) or getattr(related, "slug", None) or str(related)
    if isinstance(field, models.DecimalField):
        return str(Decimal(value).quantize(Decimal(1).scaleb(-field.decimal_places)))
    if isinstance(value, date):
        return value.isoformat()
    return value


def _values(instance: models.Model) -> dict:
    """The row's editable values as JSON: related rows by short name or slug, Decimals as strings at the
    field's places, dates ISO."""
    return {field.name: _plain(instance, field) for field in instance._meta.concrete_fields
            if field.editable and not field.primary_key}


def _record(*, user, subject: str, before: dict | None, after: dict | None) -> None:
    if before != after:
        MoneyChange.objects.create(changed_by=user, subject=subject, before=before, after=after)
