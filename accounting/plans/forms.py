"""The plan's month, shared by its page and its API: ``period=YYYY-MM``, this month when left out."""

from __future__ import annotations

from datetime import date, datetime

from django import forms
from django.utils.translation import gettext_lazy as _

from accounting.money.forms import PeriodField
from accounting.plans.selectors import default_period


class PlanPeriodForm(forms.Form):
    period = PeriodField(label=_("Month"), required=False)

    def __init__(self, *args, now: datetime, **kwargs):
        super().__init__(*args, **kwargs)
        self.now = now

    def period_or_default(self) -> date:
        """The valid month asked for, or this month (business calendar) when none is."""
        return self.cleaned_data.get("period") or default_period(now=self.now)
