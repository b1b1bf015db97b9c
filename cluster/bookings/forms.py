"""Forms of the booking pages: the calendar's week, a booking request, and a booking's new end.

They validate shapes only (a field is there, a number is a number); the booking rules live in
``cluster.bookings.services`` and come back as :class:`~cluster.bookings.services.BookingRefused`.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal

from django import forms
from django.contrib.auth import get_user_model
from django.utils.translation import gettext_lazy as _

from cluster.bookings.calendar import GROUP_BY_MODEL, GROUP_BY_NODE, calendar_gpus
from cluster.bookings.holds import bookable_gpus
from cluster.choices import NodeStatus
from cluster.models import BookingMode, GpuModel, Node
from core.timewindow import validate_in_window
from teams.models import Project, Team
from teams.roles import is_admin

LOCAL_MINUTE = "%Y-%m-%dT%H:%M"  # what <input type="datetime-local"> sends and shows
GRID_SECONDS = 1800
HOURS_STEP = Decimal("0.5")


class LocalDateTimeInput(forms.DateTimeInput):
    """A datetime-local input on the 30-minute grid; values are in the display zone."""

    input_type = "datetime-local"

    def __init__(self, attrs=None):
        super().__init__(attrs={"step": GRID_SECONDS, **(attrs or {})}, format=LOCAL_MINUTE)


def local_datetime_field(label) -> forms.DateTimeField:
    return forms.DateTimeField(label=label, widget=LocalDateTimeInput(), input_formats=[LOCAL_MINUTE, "%Y-%m-%d %H:%M"],
                               validators=[validate_in_window])


class WeekForm(forms.Form):
    """``?week=`` (any day of the week) and ``?group=node|model``; anything invalid means this week by node."""

    week = forms.DateField(label=_("Week of"), required=False, widget=forms.DateInput(attrs={"type": "date"}),
                           validators=[validate_in_window])
    group = forms.ChoiceField(
        label=_("Rows"), required=False,
        choices=[(GROUP_BY_NODE, _("by node")), (GROUP_BY_MODEL, _("by GPU model"))],
    )

    def chosen(self, *, today: date) -> tuple[date, str]:
        if not self.is_bound or not self.is_valid():
            return today, GROUP_BY_NODE
        return self.cleaned_data["week"] or today, self.cleaned_data["group"] or GROUP_BY_NODE


class GpuChoiceField(forms.ModelMultipleChoiceField):
    def label_from_instance(self, gpu):
        return f"{gpu.node.hostname}/{gpu.index} ({gpu.model.short_name})"


class MemberChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, user):
        return user.get_full_name() or user.get_username()


class BookingForm(forms.Form):
    """A booking request: for whom, which GPUs (by model and count, named, or a whole node), and when."""

    team = forms.ModelChoiceField(label=_("Team"), queryset=Team.objects.none(), empty_label=None)
    booker = MemberChoiceField(
        label=_("Booked for"), queryset=get_user_model().objects.none(), required=False,
        help_text=_("A team lead may book for anyone in the team."),
    )
    project = forms.ModelChoiceField(label=_("Project"), queryset=Project.objects.none(), required=False)
    mode = forms.ChoiceField(label=_("What"), choices=BookingMode.choices, initial=BookingMode.MODEL,
                             widget=forms.RadioSelect)
    gpu_model = forms.ModelChoiceField(label=_("GPU model"), queryset=GpuModel.objects.all(), required=False)
    count = forms.IntegerField(label=_("How many"), min_value=1, initial=1, required=False)
    gpus = GpuChoiceField(label=_("GPUs"), queryset=bookable_gpus().none(), required=False)
    node = forms.ModelChoiceField(label=_("Node"), queryset=Node.objects.none(), required=False,
                                  to_field_name="hostname")
    start = local_datetime_field(_("From"))
    hours = forms.DecimalField(
        label=_("Hours"), min_value=HOURS_STEP, max_digits=5, decimal_places=1, step_size=HOURS_STEP, initial=2,
        help_text=_("The length of the booking, in steps of half an hour."),
    )
    note = forms.CharField(label=_("Purpose"), max_length=200, required=False)

    def __init__(self, data=None, *, user, **kwargs):
        super().__init__(data, **kwargs)
        self.user = user
        admin = is_admin(user)
        teams = Team.objects.all() if admin else Team.objects.filter(memberships__user=user)
        self.fields["team"].queryset = teams
        self.fields["project"].queryset = Project.objects.filter(team__in=teams, active=True).select_related("team")
        self.fields["gpus"].queryset = bookable_gpus().select_related("node", "model").order_by("node__hostname", "index")
        self.fields["node"].queryset = Node.objects.exclude(status__in=NodeStatus.set_by_admins())
        led = Team.objects.all() if admin else Team.objects.led_by(user)
        if led.exists():
            self.fields["booker"].queryset = get_user_model().objects.filter(
                memberships__team__in=led
            ).distinct().order_by("username")
            self.fields["booker"].initial = user.pk
        else:  # an engineer books for themself only
            del self.fields["booker"]

    @property
    def books_for_others(self) -> bool:
        return "booker" in self.fields

    def clean(self):
        data = super().clean()
        mode = data.get("mode")
        if mode == BookingMode.MODEL:
            if not data.get("gpu_model"):
                self.add_error("gpu_model", _("Choose a GPU model."))
            if not data.get("count"):
                self.add_error("count", _("Say how many GPUs."))
        elif mode == BookingMode.GPUS and not data.get("gpus"):
            self.add_error("gpus", _("Choose at least one GPU."))
        elif mode == BookingMode.NODE and not data.get("node"):
            self.add_error("node", _("Choose a node."))
        return data

    def end(self) -> datetime:
        return self.cleaned_data["start"] + timedelta(hours=float(self.cleaned_data["hours"]))

    def what(self) -> dict:
        """The GPUs part of ``booking_create``'s arguments for the chosen mode."""
        data = self.cleaned_data
        if data["mode"] == BookingMode.GPUS:
            return {"gpus": list(data["gpus"])}
        if data["mode"] == BookingMode.NODE:
            return {"node": data["node"]}
        return {"gpu_model": data["gpu_model"], "count": data["count"]}

    def search_request(self) -> tuple[GpuModel, int] | None:
        """(model, count) to search a slot for: the model and count, or what named GPUs or a node amount to."""
        data = self.cleaned_data
        if data.get("mode") == BookingMode.GPUS and data.get("gpus"):
            gpus = list(data["gpus"])
            return gpus[0].model, len(gpus)
        if data.get("mode") == BookingMode.NODE and data.get("node"):
            gpus = list(bookable_gpus().filter(node=data["node"]).select_related("model"))
            return (gpus[0].model, len(gpus)) if gpus else None
        if data.get("gpu_model") and data.get("count"):
            return data["gpu_model"], data["count"]
        return None


def initial_from_query(query, *, start: datetime) -> dict:
    """The booking form's initial values from the calendar's links: ``?gpus=<id>`` (a lane),
    ``?node=<hostname>``, ``?model=<short name>``, ``&hours=``; ``start`` is already resolved."""
    initial = {"start": start, "mode": BookingMode.MODEL}
    gpu_id = query.get("gpus", "")
    if gpu_id.isdigit():
        gpu = calendar_gpus().filter(pk=int(gpu_id)).select_related("model").first()
        if gpu is not None:
            initial.update(mode=BookingMode.GPUS, gpus=[gpu.pk], gpu_model=gpu.model, count=1)
    if hostname := query.get("node"):
        initial.update(mode=BookingMode.NODE, node=hostname)
    if model_name := query.get("model"):
        model = GpuModel.objects.filter(short_name=model_name).first()
        if model is not None:
            initial.update(mode=BookingMode.MODEL, gpu_model=model)
    try:
        hours = Decimal(query.get("hours", ""))
    except ArithmeticError:
        hours = None
    if hours is not None and hours.is_finite() and hours > 0 and hours % HOURS_STEP == 0:
        initial["hours"] = hours
    return initial


class BookingEndForm(forms.Form):
    """A booking's new end (extend, or shorten)."""

    end = local_datetime_field(_("New end"))
