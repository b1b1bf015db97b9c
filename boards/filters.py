"""The daily board's parameters, shared by the page, its live JSON and the API: the business day (default
yesterday), and the pool, GPU model, node and team to narrow it to. Invalid parameters are reported
naming the parameter and the rule; the page shows the error, the API answers 400."""

from __future__ import annotations

from datetime import date, datetime, timedelta

from django import forms
from django.utils.translation import gettext_lazy as _

from boards.scope import BoardScope
from cluster.models import GpuModel, Node
from core.timeutils import business_day_of, business_today
from core.timewindow import WINDOW_START
from core.widgets import QuickSelect
from teams.models import Team

DATE_RULE = _("The “date” parameter must be a business day written YYYY-MM-DD, from 2000-01-01 to today.")
POOL_RULE = _("The “pool” parameter must name a node pool of the cluster.")
MODEL_RULE = _("The “gpu_model” parameter must be a GPU model's short name, such as H100.")
NODE_RULE = _("The “node” parameter must be a node's hostname.")
TEAM_RULE = _("The “team” parameter must be a team's slug.")


class BoardFilterForm(forms.Form):
    """``date`` (YYYY-MM-DD, business zone), ``pool``, ``gpu_model`` (short name), ``node`` (hostname) and
    ``team`` (slug). Every role may narrow to any team: team names and totals are cluster-wide figures
    (DESIGN.md §2); what a viewer may see of a team's jobs is decided by the selectors."""

    date = forms.DateField(
        label=_("Day"), required=False, input_formats=["%Y-%m-%d"], error_messages={"invalid": DATE_RULE},
        widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"),
    )
    # QuickSelect: a thousand-GPU cluster's nodes are a long list, and Django's template per option is slow.
    # The querysets read only what a choice shows (a node's agent token is never decrypted here).
    pool = forms.ChoiceField(label=_("Pool"), required=False, error_messages={"invalid_choice": POOL_RULE},
                             widget=QuickSelect)
    gpu_model = forms.ModelChoiceField(
        label=_("GPU model"), queryset=GpuModel.objects.only("id", "short_name").order_by("short_name"),
        to_field_name="short_name", required=False, empty_label=_("All models"),
        error_messages={"invalid_choice": MODEL_RULE}, widget=QuickSelect,
    )
    node = forms.ModelChoiceField(
        label=_("Node"), queryset=Node.objects.only("id", "hostname").order_by("hostname"), to_field_name="hostname",
        required=False, empty_label=_("All nodes"), error_messages={"invalid_choice": NODE_RULE}, widget=QuickSelect,
    )
    team = forms.ModelChoiceField(
        label=_("Team"), queryset=Team.objects.only("id", "name", "slug").order_by("name"), to_field_name="slug",
        required=False, empty_label=_("All teams"), error_messages={"invalid_choice": TEAM_RULE}, widget=QuickSelect,
    )

    def __init__(self, data=None, *, now: datetime, **kwargs):
        if data is not None and not data.get("date"):
            data = data.copy()  # the picker shows the day the board defaults to
            data["date"] = (business_today(now=now) - timedelta(days=1)).isoformat()
        super().__init__(data, **kwargs)
        self.now = now
        self.fields["pool"].choices = [("", _("All pools")), *((p, p) for p in Node.objects.pools())]
        self.fields["date"].widget.attrs.update(
            min=WINDOW_START.date().isoformat(), max=business_today(now=now).isoformat())

    def clean_date(self) -> date:
        day = self.cleaned_data.get("date")
        today = business_today(now=self.now)
        if day is None:
            return today - timedelta(days=1)
        if day < business_day_of(WINDOW_START) or day > today:
            raise forms.ValidationError(DATE_RULE, code="outside")
        return day

    @classmethod
    def for_page(cls, data, *, now: datetime) -> BoardFilterForm:
        """A valid form for a page: ``data`` when its parameters are valid, else the default board
        (yesterday, unfiltered) with ``data``'s errors in ``shown_errors`` for the page to show."""
        form = cls(data, now=now)
        if form.is_valid():
            form.shown_errors = {}
            return form
        fallback = cls({}, now=now)
        fallback.is_valid()
        fallback.shown_errors = form.errors
        return fallback

    def scope(self) -> BoardScope:
        """The board's scope from valid parameters (call after :meth:`is_valid`)."""
        data = self.cleaned_data
        model, node, team = data.get("gpu_model"), data.get("node"), data.get("team")
        return BoardScope(
            day=data["date"], now=self.now, pool=data.get("pool") or None,
            gpu_model_id=model.pk if model else None, node_id=node.pk if node else None,
            team_id=team.pk if team else None,
        )
