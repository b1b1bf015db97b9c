"""Admin for money (DESIGN.md §5): rate cards, energy tariffs, the charge policy and quotas are saved and
deleted through ``accounting.money.services``, so every change is audited and a refusal shows on the
form; the audit trail, statements and ledger entries are read-only here (the ledger is append-only)."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from accounting.models import ChargePolicy, EnergyTariff, LedgerEntry, MoneyChange, Quota, RateCard, Statement
from accounting.money.services import (
    energy_tariff_delete,
    energy_tariff_save,
    policy_defaults,
    policy_update,
    quota_delete,
    quota_save,
    rate_card_delete,
    rate_card_save,
)
from teams.roles import is_admin, is_finance


class ServiceForm(forms.ModelForm):
    """A model form whose validation is the service's: ``_post_clean`` (the model's own checks, which
    would only repeat the service's with vaguer messages) calls the service, which validates and saves
    in the admin's transaction; its ValidationError lands on the form's fields."""

    user = None  # set per request by ServiceAdmin.get_form

    def save_through_service(self, data: dict):
        raise NotImplementedError

    def _post_clean(self):
        if self.errors:
            return
        existing = self.instance if self.instance.pk is not None else None
        try:
            self.instance = self.save_through_service({**self.cleaned_data, "existing": existing})
        except ValidationError as exc:
            self._update_errors(exc)


class RateCardForm(ServiceForm):
    class Meta:
        model = RateCard
        fields = ["gpu_model", "valid_from", "valid_until", "price_per_card_hour", "currency"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["currency"].required = False
        self.fields["currency"].help_text = _("Empty: the configured currency.")

    def save_through_service(self, data):
        return rate_card_save(user=self.user, gpu_model=data["gpu_model"], valid_from=data["valid_from"],
                              valid_until=data["valid_until"], price_per_card_hour=data["price_per_card_hour"],
                              currency=data["currency"], card=data["existing"])


class EnergyTariffForm(ServiceForm):
    class Meta:
        model = EnergyTariff
        fields = ["valid_from", "valid_until", "price_per_kwh", "currency"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["currency"].required = False
        self.fields["currency"].help_text = _("Empty: the configured currency.")

    def save_through_service(self, data):
        return energy_tariff_save(user=self.user, valid_from=data["valid_from"], valid_until=data["valid_until"],
                                  price_per_kwh=data["price_per_kwh"], currency=data["currency"],
                                  tariff=data["existing"])


class ChargePolicyForm(ServiceForm):
    class Meta:
        model = ChargePolicy
        fields = ["idle_charge_factor", "overflow_multiplier", "unallocated"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk is None:
            for name, value in policy_defaults().items():
                self.fields[name].initial = value

    def save_through_service(self, data):
        return policy_update(user=self.user, idle_charge_factor=data["idle_charge_factor"],
                             overflow_multiplier=data["overflow_multiplier"], unallocated=data["unallocated"])


class QuotaForm(ServiceForm):
    class Meta:
        model = Quota
        fields = ["team", "gpu_model", "period_start", "expires", "card_hours"]

    def save_through_service(self, data):
        return quota_save(user=self.user, team=data["team"], gpu_model=data["gpu_model"],
                          period_start=data["period_start"], expires=data["expires"], card_hours=data["card_hours"],
                          quota=data["existing"])


class ServiceAdmin(admin.ModelAdmin):
    """Saves went through the form's service call; deletes go through ``delete_service``. Only admin and
    finance may add, change or delete (the services check again)."""

    delete_service = None

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)  # a new class per request
        form.user = request.user
        return form

    def save_model(self, request, obj, form, change):
        closed = getattr(obj, "closed_periods", None)
        if closed:
            self.message_user(request, _(
                "This price was used by the closed statement(s) of %(periods)s: reopen and close them again to "
                "book the difference.") % {"periods": ", ".join(closed)}, level=messages.WARNING)

    def save_related(self, request, form, formsets, change):
        pass  # no many-to-many fields or inlines; the service saved everything

    def delete_model(self, request, obj):
        type(self).delete_service(user=request.user, **{self.delete_argument: obj})

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)

    def _writer(self, request) -> bool:
        return is_admin(request.user) or is_finance(request.user)

    def has_add_permission(self, request):
        return super().has_add_permission(request) and self._writer(request)

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and self._writer(request)

    def has_delete_permission(self, request, obj=None):
        return super().has_delete_permission(request, obj) and self._writer(request)


@admin.register(RateCard)
class RateCardAdmin(ServiceAdmin):
    form = RateCardForm
    delete_service, delete_argument = rate_card_delete, "card"
    list_display = ["gpu_model", "valid_from", "valid_until", "price_per_card_hour", "currency"]
    list_filter = ["gpu_model"]
    list_select_related = ["gpu_model"]
    date_hierarchy = "valid_from"


@admin.register(EnergyTariff)
class EnergyTariffAdmin(ServiceAdmin):
    form = EnergyTariffForm
    delete_service, delete_argument = energy_tariff_delete, "tariff"
    list_display = ["valid_from", "valid_until", "price_per_kwh", "currency"]


@admin.register(ChargePolicy)
class ChargePolicyAdmin(ServiceAdmin):
    """The one row of charge policies; until it is first saved the settings' defaults apply."""

    form = ChargePolicyForm
    list_display = ["idle_charge_factor", "overflow_multiplier", "unallocated", "updated_at"]

    def has_add_permission(self, request):
        return super().has_add_permission(request) and not ChargePolicy.objects.exists()

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Quota)
class QuotaAdmin(ServiceAdmin):
    form = QuotaForm
    delete_service, delete_argument = quota_delete, "quota"
    list_display = ["team", "gpu_model", "period_start", "expires", "card_hours"]
    list_filter = ["team", "gpu_model"]
    list_select_related = ["team", "gpu_model"]


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written only by services (the audit trail, period closes): shown, never edited here."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(MoneyChange)
class MoneyChangeAdmin(ReadOnlyAdmin):
    list_display = ["changed_at", "changed_by", "subject"]
    list_select_related = ["changed_by"]
    search_fields = ["subject", "changed_by__username"]
    date_hierarchy = "changed_at"
    fields = ["changed_at", "changed_by", "subject", "before", "after"]


@admin.register(Statement)
class StatementAdmin(ReadOnlyAdmin):
    list_display = ["period", "revision", "status", "currency", "closed_at", "closed_by", "reopened_at"]
    list_filter = ["status"]
    list_select_related = ["closed_by", "reopened_by"]


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ["day", "team", "project", "gpu_model", "kind", "rate", "rate_valid_from", "ticks", "statement"]
    list_filter = ["kind", "team", "gpu_model"]
    list_select_related = ["team", "project", "gpu_model", "statement"]
    raw_id_fields = ["statement", "reverses"]
    show_full_result_count = False
