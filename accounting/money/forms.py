"""Forms of the finance page (issue 8): the period picker, reopening with a reason, a new rate card and
the charge policy. The forms only parse input; the rules (no negative price, no overlap, …) are the
services' (accounting.money.services), whose ``ValidationError`` :func:`add_service_errors` puts on the
form's fields."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError
from django.utils.translation import gettext_lazy as _

from accounting.models import UnallocatedPolicy
from accounting.money.close import parse_period
from cluster.models import GpuModel
from core.timewindow import validate_in_window


def add_service_errors(form: forms.Form, error: ValidationError) -> None:
    """A service's ``{field: message}`` refusal on the form: each message on its field, or above the form
    when the form has no such field."""
    for field, messages in error.message_dict.items():
        form.add_error(field if field in form.fields else None, messages)


class PeriodField(forms.CharField):
    """A month written ``YYYY-MM`` (what ``<input type="month">`` sends), cleaned to its first day."""

    widget = forms.TextInput(attrs={"type": "month"})

    def to_python(self, value):
        text = super().to_python(value)
        if not text:
            return None
        try:
            return parse_period(text)
        except ValueError as error:
            raise ValidationError(str(error)) from None


class PeriodForm(forms.Form):
    period = PeriodField(label=_("Period"))


class CloseForm(forms.Form):
    period = PeriodField(widget=forms.HiddenInput)


class ReopenForm(forms.Form):
    period = PeriodField(widget=forms.HiddenInput)
    reason = forms.CharField(label=_("Reason"), max_length=500, widget=forms.TextInput(attrs={"size": 40}),
                             help_text=_("Why the period is reopened; kept on the statement."),
                             error_messages={"required": _("Say why the period is reopened.")})


class RateCardForm(forms.Form):
    gpu_model = forms.ModelChoiceField(label=_("GPU model"), queryset=GpuModel.objects.order_by("short_name"),
                                       to_field_name="pk")
    valid_from = forms.DateField(label=_("Valid from"), widget=forms.DateInput(attrs={"type": "date"}),
                                 validators=[validate_in_window])
    valid_until = forms.DateField(label=_("Valid until"), required=False,
                                  widget=forms.DateInput(attrs={"type": "date"}), validators=[validate_in_window],
                                  help_text=_("Empty: until further notice."))
    # No minimum here: the service refuses a negative price with its own message, on this field.
    price_per_card_hour = forms.DecimalField(label=_("Price per card-hour"), max_digits=14, decimal_places=4)


class PolicyForm(forms.Form):
    idle_charge_factor = forms.DecimalField(label=_("Idle charge factor"), max_digits=6, decimal_places=4,
                                            help_text=_("Idle card-hours cost the rate times this."))
    overflow_multiplier = forms.DecimalField(label=_("Overflow multiplier"), max_digits=6, decimal_places=4,
                                             help_text=_("Card-hours beyond a quota cost the rate times this."))
    unallocated = forms.ChoiceField(label=_("Unallocated capacity"), choices=UnallocatedPolicy.choices)
