"""How a write to money is made (DESIGN.md §5, §6): who may write, the row locked for the change, the input
rules every price and quota shares, a save that survives a concurrent writer, and the audit record.

The services (accounting/money/services.py) say what each write checks; this module is how every one of
them is carried out:

- only admin and finance write (``PermissionDenied`` otherwise);
- bad input is a ``ValidationError`` of ``{field: message}`` whose message names the rule;
- the exclusion constraints are the guard against overlapping validity, whatever path writes: a save
  whose constraint refuses it (a concurrent writer won) raises the same error the check before would
  have. Saves to one table take their turn (an advisory lock to the end of the transaction), so two of
  them never check the constraint at once and wait on each other until PostgreSQL's deadlock detector
  aborts one (a deadlock with a writer outside these services is still tried again);
- each change is recorded in the audit trail (teams.audit, read here as ``MoneyChange``): who, when, what,
  and the values before and after (JSON: Decimals as strings, dates ISO; ``before`` is null for a
  creation, ``after`` for a deletion), in the change's own transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, OperationalError, models, transaction
from django.utils.translation import gettext as _

from core.locks import wait_turn
from core.money import currency_validator
from core.sqlstate import DEADLOCK_DETECTED, EXCLUSION_VIOLATION
from core.timewindow import OutsideWindow, check_date_in_window, window_message
from teams.audit.records import audit_record, audit_values, subject_of
from teams.roles import is_admin, is_finance

WRITE_ATTEMPTS = 3


# ---- who writes, and the row a change locks --------------------------------------------------------------

def require_writer(user) -> None:
    """Only admin and finance write to prices, the charge policy and quotas."""
    if user is None or not (is_admin(user) or is_finance(user)):
        raise PermissionDenied(_("Only admin and finance change rate cards, energy tariffs, the charge policy "
                                 "and quotas."))


def locked_for_change(model: type[models.Model], instance):
    """(the row locked for the change, its values before) or (a new instance, None)."""
    if instance is None or instance.pk is None:
        return model(), None
    related = [field.name for field in model._meta.concrete_fields if field.is_relation]
    rows = model.objects.select_for_update(of=("self",))
    row = (rows.select_related(*related) if related else rows).get(pk=instance.pk)
    return row, change_values(row)


# ---- input rules: each adds ``{field: message}`` to ``problems`` -----------------------------------------

def check_validity(problems: dict, valid_from, valid_until) -> None:
    """A validity ``[valid_from, valid_until)``: a start, both in the window, the end (if any) after the start."""
    if valid_from is None:
        problems["valid_from"] = _("is required.")
    check_window(problems, "valid_from", valid_from)
    check_window(problems, "valid_until", valid_until)
    if valid_from is not None and valid_until is not None and valid_until <= valid_from:
        problems.setdefault("valid_until", _(
            "must be after valid_from (it is the first day no longer covered), or empty."))


def check_window(problems: dict, field: str, day) -> None:
    """A day outside the supported time window (core.timewindow) is a problem of ``field``."""
    try:
        check_date_in_window(day, field=field)
    except OutsideWindow as error:
        problems[field] = window_message(error)


def not_negative(problems: dict, field: str, value) -> Decimal | None:
    """``value`` as a Decimal, required, finite and zero or more."""
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


def configured_currency(problems: dict, code: str | None, other_message: str) -> str:
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


def raise_problems(problems: dict) -> None:
    """The ValidationError of every problem found, if any."""
    if problems:
        raise ValidationError(problems)


def validate_fields(instance: models.Model) -> None:
    """The model's own field checks (digits, lengths) after the service's rules; the constraints are the database's."""
    instance.full_clean(validate_unique=False, validate_constraints=False)


# ---- the save --------------------------------------------------------------------------------------------

def save_guarded(instance: models.Model, *, constraint: str, conflict: Callable[[], dict]) -> None:
    """Save ``instance`` in a savepoint; when ``constraint`` (an exclusion constraint) refuses it because a
    concurrent writer got there first, raise ``conflict()`` as the ValidationError the check before would
    have. Saves to one table wait for each other's turn (see the module's docstring)."""
    wait_turn(f"cardhour.money.{instance._meta.db_table}")
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


# ---- the audit record ------------------------------------------------------------------------------------

def change_subject(what: str, closed_periods: list[str]) -> str:
    """What changed, and the closed periods it priced, cut to the subject's length."""
    if not closed_periods:
        return what
    return subject_of(f"{what}; priced closed {', '.join(closed_periods)}")


def change_values(instance: models.Model) -> dict:
    """The row's editable values as the audit trail keeps them (teams.audit.records.audit_values)."""
    return audit_values(instance)


def record_change(*, user, kind: str, instance: models.Model, subject: str, before: dict | None,
                  after: dict | None, team_id: int | None = None) -> None:
    """The audit row of the change to ``instance`` (of ``kind``), unless nothing changed."""
    audit_record(kind=kind, user=user, object_id=instance.pk, team_id=team_id, subject=subject, before=before,
                 after=after)
