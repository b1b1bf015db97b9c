"""Serializers of the money API: rate cards, energy tariffs, the charge policy, its audit trail and quotas.

They check shapes (dates, decimal digits, known names); the rules (no overlap, not negative, the one
currency, expiry after start) are the services' (``accounting.money.services``), whose messages name them.
Money and card-hours are decimal strings."""

from __future__ import annotations

from django.conf import settings
from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from accounting.models import ChargePolicy, EnergyTariff, MoneyChange, Quota, RateCard, UnallocatedPolicy
from accounting.money.models import PRICE_DIGITS, PRICE_PLACES
from accounting.quotas.rules import card_hours_from_ticks
from cluster.models import GpuModel
from core.api import JsonText, ZeroOrMoreDecimalField
from teams.models import Team

FACTOR_DIGITS, FACTOR_PLACES = 6, 4  # as ChargePolicy keeps them
CARD_HOUR_DIGITS, CARD_HOUR_PLACES = 14, 3  # as Quota keeps them


def _currency_field():
    return serializers.CharField(max_length=3, required=False, allow_blank=True, help_text=_(
        "ISO 4217 code; must be the configured currency (omit it to use that one)."))


def _price_field(help_text):
    # No validators here: the service's "must be zero or more" names the rule (the schema states it).
    return ZeroOrMoreDecimalField(max_digits=PRICE_DIGITS, decimal_places=PRICE_PLACES, help_text=help_text)


class RateCardSerializer(JsonText, serializers.ModelSerializer):
    gpu_model = serializers.SlugRelatedField(slug_field="short_name", queryset=GpuModel.objects.all(),
                                             help_text=_("The GPU model's short name, e.g. H200."))
    price_per_card_hour = _price_field(_("Price of one card-hour, zero or more, in the configured currency."))
    currency = _currency_field()

    class Meta:
        model = RateCard
        fields = ["id", "gpu_model", "valid_from", "valid_until", "price_per_card_hour", "currency", "created_at"]
        read_only_fields = ["created_at"]
        extra_kwargs = {"valid_until": {"help_text": _(
            "First business day the price no longer applies (exclusive); null: until further notice.")}}


class EnergyTariffSerializer(JsonText, serializers.ModelSerializer):
    price_per_kwh = _price_field(_("Price of one kWh, zero or more, in the configured currency."))
    currency = _currency_field()

    class Meta:
        model = EnergyTariff
        fields = ["id", "valid_from", "valid_until", "price_per_kwh", "currency"]
        extra_kwargs = {"valid_until": {"help_text": _(
            "First business day the price no longer applies (exclusive); null: until further notice.")}}


class ChargePolicySerializer(JsonText, serializers.ModelSerializer):
    idle_charge_factor = ZeroOrMoreDecimalField(
        max_digits=FACTOR_DIGITS, decimal_places=FACTOR_PLACES,
        help_text=_("Idle card-hours cost the rate times this; zero or more."))
    overflow_multiplier = ZeroOrMoreDecimalField(
        max_digits=FACTOR_DIGITS, decimal_places=FACTOR_PLACES,
        help_text=_("Card-hours beyond a quota cost the rate times this; zero or more."))
    unallocated = serializers.ChoiceField(
        choices=UnallocatedPolicy.choices, error_messages={"invalid_choice": _("must be kept or shared.")},
        help_text=_("kept: the platform keeps the cost of unallocated capacity; shared: teams share it in "
                    "proportion to their allocated cost."))
    currency = serializers.SerializerMethodField(help_text=_("The configured currency."))

    class Meta:
        model = ChargePolicy
        fields = ["idle_charge_factor", "overflow_multiplier", "unallocated", "currency", "updated_at"]
        read_only_fields = ["updated_at"]
        extra_kwargs = {"updated_at": {"allow_null": True, "help_text": _(
            "When admin or finance last changed it; null: the settings' defaults apply.")}}

    def get_currency(self, policy) -> str:
        return settings.CARDHOUR_CURRENCY


class MoneyChangeSerializer(serializers.ModelSerializer):
    changed_by = serializers.CharField(source="changed_by.username", read_only=True, allow_null=True, default=None)
    before = serializers.JSONField(read_only=True, allow_null=True, help_text=_("Values before; null: created."))
    after = serializers.JSONField(read_only=True, allow_null=True, help_text=_("Values after; null: deleted."))

    class Meta:
        model = MoneyChange
        fields = ["id", "changed_at", "changed_by", "subject", "before", "after"]
        read_only_fields = fields


class QuotaSerializer(JsonText, serializers.ModelSerializer):
    """A quota; when read, with where it stands (``context["statuses"]``: quota id → QuotaStatus)."""

    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())
    gpu_model = serializers.SlugRelatedField(
        slug_field="short_name", queryset=GpuModel.objects.all(), allow_null=True, required=False,
        help_text=_("The GPU model's short name; null: every model (the team-wide quota)."))
    card_hours = ZeroOrMoreDecimalField(max_digits=CARD_HOUR_DIGITS, decimal_places=CARD_HOUR_PLACES,
                                          help_text=_("Card-hours the team may use in the period; zero or more."))
    used_card_hours = serializers.SerializerMethodField(help_text=_(
        "Allocated card-hours from period_start to today (or the expiry), today's partial usage included."))
    remaining_card_hours = serializers.SerializerMethodField(help_text=_("card_hours − used (negative: over)."))
    used_percent = serializers.SerializerMethodField(help_text=_("Percent used, one decimal."))
    burn_card_hours_per_day = serializers.SerializerMethodField(help_text=_(
        "The trailing 7-day mean burn (full business days before today)."))
    run_out = serializers.SerializerMethodField(help_text=_(
        "Forecast day the quota is used up at that burn (today when it already is); null: not burning."))
    runs_out_before_expiry = serializers.SerializerMethodField()
    thresholds_crossed = serializers.SerializerMethodField(help_text=_("Which of 50, 75, 90, 100 % are reached."))
    expiry_warning = serializers.SerializerMethodField(help_text=_("True from 15 days before the expiry."))

    class Meta:
        model = Quota
        fields = ["id", "team", "gpu_model", "period_start", "expires", "card_hours", "used_card_hours",
                  "remaining_card_hours", "used_percent", "burn_card_hours_per_day", "run_out",
                  "runs_out_before_expiry", "thresholds_crossed", "expiry_warning"]
        extra_kwargs = {
            "period_start": {"help_text": _("First business day counted.")},
            "expires": {"help_text": _("First business day no longer counted; after period_start.")},
        }

    def _status(self, quota):
        return self.context.get("statuses", {}).get(quota.pk)

    def get_used_card_hours(self, quota) -> str | None:
        status = self._status(quota)
        return None if status is None else str(status.used_card_hours)

    def get_remaining_card_hours(self, quota) -> str | None:
        status = self._status(quota)
        return None if status is None else str(status.remaining_card_hours)

    def get_used_percent(self, quota) -> str | None:
        status = self._status(quota)
        return None if status is None else str(status.used_percent)

    def get_burn_card_hours_per_day(self, quota) -> str | None:
        status = self._status(quota)
        if status is None:
            return None
        burn = status.forecast.burn_ticks_per_day
        return str(card_hours_from_ticks(round(burn)))

    def get_run_out(self, quota) -> str | None:
        status = self._status(quota)
        return None if status is None or status.forecast.run_out is None else status.forecast.run_out.isoformat()

    def get_runs_out_before_expiry(self, quota) -> bool | None:
        status = self._status(quota)
        return None if status is None else status.forecast.runs_out_before_expiry

    def get_thresholds_crossed(self, quota) -> list[int] | None:
        status = self._status(quota)
        return None if status is None else list(status.thresholds)

    def get_expiry_warning(self, quota) -> bool | None:
        status = self._status(quota)
        return None if status is None else status.expiry_warning
