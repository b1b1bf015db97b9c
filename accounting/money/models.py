"""Money (DESIGN.md §5, §6): rate cards, energy tariffs, charge policies and their audit trail, quotas,
the append-only ledger and the statements a period close writes.

Quantities are integer ticks (1/840,000 GPU-second) until a statement line turns them into money:
``amount = ticks × rate`` rounded once, half-up, to the currency's minor unit.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import DateRangeField, RangeBoundary, RangeOperators
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Func, IntegerField, Q, Value
from django.utils.translation import gettext_lazy as _

from core.money import currency_validator
from teams.audit.models import AuditEntry, MoneyChangeManager, append_only

PRICE_DIGITS, PRICE_PLACES = 14, 4
RATE_DIGITS, RATE_PLACES = 24, 12  # a price times a factor, kept exact
MONEY_DIGITS, MONEY_PLACES = 18, 4  # wide enough for any minor unit; amounts are quantized per currency


class DateRange(Func):
    """``daterange(valid_from, valid_until, '[)')`` for the exclusion constraints (an open end is infinity)."""

    function = "daterange"
    output_field = DateRangeField()


def _validity():
    return DateRange("valid_from", "valid_until", RangeBoundary())


class RateCard(models.Model):
    """The price of one card-hour of a GPU model over a range of business days."""

    gpu_model = models.ForeignKey("cluster.GpuModel", on_delete=models.PROTECT, related_name="rate_cards",
                                  verbose_name=_("GPU model"))
    valid_from = models.DateField(_("valid from"), help_text=_("First business day the price applies."))
    valid_until = models.DateField(_("valid until"), null=True, blank=True,
                                   help_text=_("First business day it no longer applies; empty: until further notice."))
    price_per_card_hour = models.DecimalField(_("price per card-hour"), max_digits=PRICE_DIGITS,
                                              decimal_places=PRICE_PLACES, validators=[MinValueValidator(0)])
    currency = models.CharField(_("currency"), max_length=3, validators=[currency_validator])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["gpu_model__short_name", "valid_from"]
        verbose_name = _("rate card")
        verbose_name_plural = _("rate cards")
        constraints = [
            ExclusionConstraint(
                name="rate_card_no_overlap",
                expressions=[("gpu_model", RangeOperators.EQUAL), (_validity(), RangeOperators.OVERLAPS)],
            ),
            models.CheckConstraint(condition=Q(price_per_card_hour__gte=0), name="rate_card_price_not_negative"),
            models.CheckConstraint(condition=Q(valid_until__isnull=True) | Q(valid_until__gt=models.F("valid_from")),
                                   name="rate_card_valid_range"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_model} {self.price_per_card_hour} {self.currency} from {self.valid_from}"


class EnergyTariff(models.Model):
    """The price of one kWh over a range of business days (optional: without one, energy is not billed)."""

    valid_from = models.DateField(_("valid from"))
    valid_until = models.DateField(_("valid until"), null=True, blank=True)
    price_per_kwh = models.DecimalField(_("price per kWh"), max_digits=PRICE_DIGITS, decimal_places=PRICE_PLACES,
                                        validators=[MinValueValidator(0)])
    currency = models.CharField(_("currency"), max_length=3, validators=[currency_validator])

    class Meta:
        ordering = ["valid_from"]
        verbose_name = _("energy tariff")
        verbose_name_plural = _("energy tariffs")
        constraints = [
            ExclusionConstraint(name="energy_tariff_no_overlap", expressions=[(_validity(), RangeOperators.OVERLAPS)]),
            models.CheckConstraint(condition=Q(price_per_kwh__gte=0), name="energy_tariff_price_not_negative"),
            models.CheckConstraint(condition=Q(valid_until__isnull=True) | Q(valid_until__gt=models.F("valid_from")),
                                   name="energy_tariff_valid_range"),
        ]

    def __str__(self) -> str:
        return f"{self.price_per_kwh} {self.currency}/kWh from {self.valid_from}"


class UnallocatedPolicy(models.TextChoices):
    KEPT = "kept", _("Kept by the platform")
    SHARED = "shared", _("Shared in proportion to allocated cost")


class ChargePolicy(models.Model):
    """The one row of charge policies that admins and finance edit (settings give the defaults)."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    idle_charge_factor = models.DecimalField(_("idle charge factor"), max_digits=6, decimal_places=4,
                                             validators=[MinValueValidator(0)],
                                             help_text=_("Idle card-hours cost the rate times this."))
    overflow_multiplier = models.DecimalField(_("overflow multiplier"), max_digits=6, decimal_places=4,
                                              validators=[MinValueValidator(0)],
                                              help_text=_("Card-hours beyond a quota cost the rate times this."))
    unallocated = models.CharField(_("unallocated capacity"), max_length=8, choices=UnallocatedPolicy.choices)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = _("charge policy")
        verbose_name_plural = _("charge policies")
        constraints = [
            models.CheckConstraint(condition=Q(id=1), name="charge_policy_one_row"),
            models.CheckConstraint(condition=Q(idle_charge_factor__gte=0) & Q(overflow_multiplier__gte=0),
                                   name="charge_policy_factors_not_negative"),
        ]

    def __str__(self) -> str:
        return f"idle × {self.idle_charge_factor}, overflow × {self.overflow_multiplier}, unallocated {self.unallocated}"


class MoneyChange(AuditEntry):
    """The audit trail's changes to rate cards, energy tariffs, the charge policy and quotas (what the finance
    page and API show); the rows are the trail's own (teams.audit)."""

    objects = MoneyChangeManager()

    class Meta:
        proxy = True
        ordering = ["-changed_at", "-id"]
        verbose_name = _("money change")
        verbose_name_plural = _("money changes")


class Quota(models.Model):
    """Card-hours a team (optionally: of one GPU model) may use from a business day until its expiry."""

    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="quotas", verbose_name=_("team"))
    gpu_model = models.ForeignKey("cluster.GpuModel", on_delete=models.PROTECT, null=True, blank=True,
                                  related_name="+", verbose_name=_("GPU model"),
                                  help_text=_("Empty: every model (the team-wide quota)."))
    period_start = models.DateField(_("from"), help_text=_("First business day counted."))
    expires = models.DateField(_("expires"), help_text=_("First business day no longer counted."))
    card_hours = models.DecimalField(_("card-hours"), max_digits=14, decimal_places=3, validators=[MinValueValidator(0)])

    class Meta:
        ordering = ["team__name", "period_start"]
        verbose_name = _("quota")
        verbose_name_plural = _("quotas")
        constraints = [
            models.CheckConstraint(condition=Q(expires__gt=models.F("period_start")), name="quota_expires_after_start"),
            models.CheckConstraint(condition=Q(card_hours__gte=0), name="quota_not_negative"),
            ExclusionConstraint(
                name="quota_no_overlap",
                expressions=[("team", RangeOperators.EQUAL),
                             (Func(F("gpu_model"), Value(0), function="coalesce", output_field=IntegerField()), RangeOperators.EQUAL),
                             (DateRange("period_start", "expires", RangeBoundary()), RangeOperators.OVERLAPS)],
            ),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.gpu_model or 'all'} {self.card_hours} from {self.period_start}"


class LedgerKind(models.TextChoices):
    BUSY = "busy", _("Busy")
    IDLE = "idle", _("Idle")
    UNMEASURED = "unmeasured", _("Unmeasured")
    OVERFLOW = "overflow", _("Overflow")
    ENERGY = "energy", _("Energy")
    UNALLOCATED = "unallocated", _("Share of unallocated capacity")


class StatementStatus(models.TextChoices):
    CLOSED = "closed", _("Closed")
    REOPENED = "reopened", _("Reopened")


class Statement(models.Model):
    """One close of a billing period (a business month). A period reopened and closed again has a
    second statement holding the reversals and the new entries; only one is ever the closed one."""

    period = models.DateField(_("period"), help_text=_("First business day of the month."))
    revision = models.PositiveSmallIntegerField(_("revision"))
    status = models.CharField(_("status"), max_length=16, choices=StatementStatus.choices)
    currency = models.CharField(_("currency"), max_length=3, validators=[currency_validator])
    closed_at = models.DateTimeField(_("closed at"))
    closed_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                                  related_name="+", verbose_name=_("closed by"))
    reopened_at = models.DateTimeField(_("reopened at"), null=True, blank=True)
    reopened_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
                                    related_name="+", verbose_name=_("reopened by"))
    reopen_reason = models.TextField(_("reason for reopening"), blank=True)

    class Meta:
        ordering = ["-period", "-revision"]
        verbose_name = _("statement")
        verbose_name_plural = _("statements")
        constraints = [
            models.UniqueConstraint(fields=["period", "revision"], name="statement_one_revision"),
            models.UniqueConstraint(fields=["period"], condition=Q(status="closed"), name="statement_one_closed"),
        ]

    def __str__(self) -> str:
        return f"{self.period:%Y-%m} r{self.revision} {self.status}"


@append_only
class LedgerEntry(models.Model):
    """Usage of one business day, team, project, GPU model and kind at one rate, as a statement booked
    it. Append-only (the database refuses updates and deletes): a correction is a reversing entry with
    negative ticks, written by the statement that corrects it."""

    statement = models.ForeignKey(Statement, on_delete=models.PROTECT, related_name="entries")
    day = models.DateField(_("day"))
    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey("teams.Project", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    gpu_model = models.ForeignKey("cluster.GpuModel", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    kind = models.CharField(_("kind"), max_length=16, choices=LedgerKind.choices)
    rate = models.DecimalField(_("rate"), max_digits=RATE_DIGITS, decimal_places=RATE_PLACES,
                               help_text=_("Price per card-hour (energy: per kWh) after factors, exact."))
    rate_valid_from = models.DateField(_("rate valid from"))
    ticks = models.BigIntegerField(_("ticks"), help_text=_("Card-hour ticks; energy: millijoules."))
    reverses = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["day", "team", "kind", "id"]
        verbose_name = _("ledger entry")
        verbose_name_plural = _("ledger entries")
        indexes = [models.Index(fields=["statement", "team"]), models.Index(fields=["day", "team"])]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=LedgerKind.values), name="ledger_known_kind"),
            models.CheckConstraint(condition=~Q(ticks=0), name="ledger_not_zero"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.team_id} {self.kind} {self.ticks} @ {self.rate}"


class PricedDay(models.Model):
    """One business day's usage of one team, project, GPU model and kind (busy, idle, unmeasured; energy)
    priced at the rate card (tariff) and charge policy in force, before quota overflow, which depends on
    the whole quota period and is applied where it is read (``accounting.money.priced_days``). A cache of
    the daily aggregates: database triggers drop a day's rows when its aggregates, a rate card, a tariff,
    the charge policy or a GPU's model change; the next read prices the day again."""

    day = models.DateField(_("day"))
    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="+", db_index=False)
    project = models.ForeignKey("teams.Project", on_delete=models.CASCADE, null=True, blank=True, related_name="+",
                                db_index=False)
    gpu_model = models.ForeignKey("cluster.GpuModel", on_delete=models.CASCADE, null=True, blank=True,
                                  related_name="+", db_index=False)
    kind = models.CharField(_("kind"), max_length=16, choices=LedgerKind.choices)
    price = models.DecimalField(_("price"), max_digits=PRICE_DIGITS, decimal_places=PRICE_PLACES, null=True,
                                blank=True, help_text=_("The rate card's price per card-hour (energy: the tariff's per "
                                                        "kWh); empty: usage with no price."))
    rate = models.DecimalField(_("rate"), max_digits=RATE_DIGITS, decimal_places=RATE_PLACES, null=True, blank=True,
                               help_text=_("The price after the charge policy's factor, as a close books it."))
    rate_valid_from = models.DateField(_("rate valid from"), null=True, blank=True)
    ticks = models.BigIntegerField(_("ticks"), help_text=_("Card-hour ticks; energy: millijoules."))
    amount = models.DecimalField(_("amount"), max_digits=MONEY_DIGITS, decimal_places=MONEY_PLACES, null=True,
                                 blank=True, help_text=_("The day's ticks × rate, rounded once."))

    class Meta:
        verbose_name = _("priced day")
        verbose_name_plural = _("priced days")
        constraints = [
            models.UniqueConstraint(fields=["day", "team", "project", "gpu_model", "kind"], nulls_distinct=False,
                                    name="priced_day_one_row"),
            models.CheckConstraint(condition=Q(kind__in=["busy", "idle", "unmeasured", "energy"]),
                                   name="priced_day_kind"),
            models.CheckConstraint(condition=Q(price__isnull=True, rate__isnull=True, rate_valid_from__isnull=True,
                                               amount__isnull=True)
                                   | Q(price__isnull=False, rate__isnull=False, rate_valid_from__isnull=False,
                                       amount__isnull=False),
                                   name="priced_day_priced_or_not"),
        ]

    def __str__(self) -> str:
        return f"{self.day} team {self.team_id} {self.kind} {self.ticks} @ {self.rate}"


class PricedDayDone(models.Model):
    """A business day whose :class:`PricedDay` rows are current (a day with no usage has none, so this says
    it was priced). Dropped, with the rows, by the same triggers."""

    day = models.DateField(_("day"), primary_key=True)
    priced_at = models.DateTimeField(_("priced at"), help_text=_("The application's clock when it was priced."))

    class Meta:
        verbose_name = _("priced day done")
        verbose_name_plural = _("priced days done")

    def __str__(self) -> str:
        return f"{self.day} priced at {self.priced_at}"
