"""Bookings and maintenance windows, and the per-GPU holds that make them exclusive (DESIGN.md §6).

A booking is what a person asked for (a team's GPUs for a time range); a *hold* is one GPU held by it
over that range. Maintenance windows hold GPUs the same way, so one PostgreSQL exclusion constraint on
(GPU, range) over every active hold forbids overlap whatever path writes.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.constraints import ExclusionConstraint
from django.contrib.postgres.fields import DateTimeRangeField, RangeOperators
from django.db import models
from django.utils.translation import gettext_lazy as _

from cluster.inventory.models import Gpu, GpuModel, Node
from core.choices import ColouredChoices


class BookingStatus(ColouredChoices):
    BOOKED = "booked", _("Booked")
    ENDED = "ended", _("Ended")
    CANCELLED = "cancelled", _("Cancelled")
    RELEASED = "released", _("Released while idle")

    @classmethod
    def _colours(cls):
        return {"booked": "green", "ended": "grey", "cancelled": "grey", "released": "amber"}


class BookingMode(models.TextChoices):
    MODEL = "model", _("GPUs of a model")
    GPUS = "gpus", _("Named GPUs")
    NODE = "node", _("Whole node")


class BookingQuerySet(models.QuerySet):
    def visible_to(self, user) -> BookingQuerySet:
        """Admin and finance: all. Leads and engineers: their teams' bookings (the occupancy calendar
        shows everyone's holds by team name only, through :class:`GpuHold`)."""
        from teams.models import Team
        from teams.roles import sees_all_teams

        if sees_all_teams(user):
            return self
        return self.filter(team__in=Team.objects.visible_to(user))

    def current(self) -> BookingQuerySet:
        return self.filter(status=BookingStatus.BOOKED)


class Booking(models.Model):
    """A team's request for GPUs over a time range, booked by one person; its GPUs are its holds."""

    team = models.ForeignKey("teams.Team", on_delete=models.PROTECT, related_name="bookings", verbose_name=_("team"))
    project = models.ForeignKey(
        "teams.Project", on_delete=models.PROTECT, null=True, blank=True, related_name="bookings",
        verbose_name=_("project"),
    )
    booker = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="bookings", verbose_name=_("booked for")
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+", verbose_name=_("booked by")
    )
    mode = models.CharField(_("what"), max_length=8, choices=BookingMode.choices)
    gpu_model = models.ForeignKey(
        GpuModel, on_delete=models.PROTECT, null=True, blank=True, related_name="+", verbose_name=_("GPU model")
    )
    node = models.ForeignKey(
        Node, on_delete=models.PROTECT, null=True, blank=True, related_name="+", verbose_name=_("node"),
        help_text=_("Set when a whole node was booked."),
    )
    gpu_count = models.PositiveIntegerField(_("GPUs"))
    start = models.DateTimeField(_("from"))
    end = models.DateTimeField(_("until"))
    booked_end = models.DateTimeField(_("booked until"), help_text=_("The end as booked or last extended."))
    status = models.CharField(_("status"), max_length=16, choices=BookingStatus.choices, default=BookingStatus.BOOKED)
    note = models.CharField(_("purpose"), max_length=200, blank=True)
    created_at = models.DateTimeField(_("created"))
    closed_at = models.DateTimeField(_("closed"), null=True, blank=True, help_text=_("When it ended, was cancelled or released."))
    idle_warned_at = models.DateTimeField(null=True, blank=True)
    reminded_at = models.DateTimeField(null=True, blank=True, help_text=_("When the booker was told the end is near."))

    objects = BookingQuerySet.as_manager()

    class Meta:
        ordering = ["-start", "-id"]
        verbose_name = _("booking")
        verbose_name_plural = _("bookings")
        indexes = [models.Index(fields=["status", "end"]), models.Index(fields=["team", "-start"])]
        constraints = [
            models.CheckConstraint(condition=models.Q(end__gt=models.F("start")), name="booking_ends_after_start"),
            models.CheckConstraint(condition=models.Q(gpu_count__gte=1), name="booking_holds_a_gpu"),
            models.CheckConstraint(condition=models.Q(status__in=BookingStatus.values), name="booking_known_status"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.team} {self.gpu_count} GPU {self.start:%Y-%m-%d %H:%M}"

    @property
    def status_colour(self) -> str:
        return BookingStatus(self.status).colour

    def is_running(self, now) -> bool:
        return self.status == BookingStatus.BOOKED and self.start <= now < self.end


class MaintenanceWindow(models.Model):
    """A time range in which admins take a node (or some of its GPUs) away from bookings."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="maintenance_windows", verbose_name=_("node"))
    start = models.DateTimeField(_("from"))
    end = models.DateTimeField(_("until"))
    reason = models.CharField(_("reason"), max_length=200)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+",
        verbose_name=_("created by"),
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    class Meta:
        ordering = ["-start"]
        verbose_name = _("maintenance window")
        verbose_name_plural = _("maintenance windows")
        constraints = [
            models.CheckConstraint(condition=models.Q(end__gt=models.F("start")), name="maintenance_ends_after_start"),
        ]

    def __str__(self) -> str:
        return f"{self.node} {self.start:%Y-%m-%d %H:%M}–{self.end:%Y-%m-%d %H:%M}"


class HoldKind(ColouredChoices):
    BOOKING = "booking", _("Booking")
    MAINTENANCE = "maintenance", _("Maintenance")

    @classmethod
    def _colours(cls):
        return {"booking": "blue", "maintenance": "amber"}


class GpuHoldQuerySet(models.QuerySet):
    def active(self) -> GpuHoldQuerySet:
        return self.filter(active=True)

    def overlapping(self, start, end) -> GpuHoldQuerySet:
        """Active holds that share any instant with ``[start, end)``."""
        return self.active().filter(during__overlap=(start, end))


class GpuHold(models.Model):
    """One GPU held over a time range by a booking (with its team, project and booker) or by a
    maintenance window. Active holds never overlap on a GPU: the database refuses it."""

    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="holds", verbose_name=_("GPU"))
    during = DateTimeRangeField(_("held"), help_text=_("[from, until) in UTC."))
    kind = models.CharField(_("kind"), max_length=16, choices=HoldKind.choices)
    booking = models.ForeignKey(
        Booking, on_delete=models.CASCADE, null=True, blank=True, related_name="holds", verbose_name=_("booking")
    )
    maintenance = models.ForeignKey(
        MaintenanceWindow, on_delete=models.CASCADE, null=True, blank=True, related_name="holds",
        verbose_name=_("maintenance window"),
    )
    team = models.ForeignKey(
        "teams.Team", on_delete=models.PROTECT, null=True, blank=True, related_name="+", verbose_name=_("team")
    )
    project = models.ForeignKey(
        "teams.Project", on_delete=models.PROTECT, null=True, blank=True, related_name="+",
        verbose_name=_("project"),
    )
    booker = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+",
        verbose_name=_("booked for"),
    )
    active = models.BooleanField(_("active"), default=True, help_text=_("False once cancelled: the GPU is free again."))

    objects = GpuHoldQuerySet.as_manager()

    class Meta:
        ordering = ["gpu", "during"]
        verbose_name = _("GPU hold")
        verbose_name_plural = _("GPU holds")
        indexes = [models.Index(fields=["booking"]), models.Index(fields=["team"])]
        constraints = [
            ExclusionConstraint(
                name="gpu_hold_no_overlap",
                expressions=[("gpu", RangeOperators.EQUAL), ("during", RangeOperators.OVERLAPS)],
                condition=models.Q(active=True),
            ),
            models.CheckConstraint(
                condition=(
                    models.Q(kind=HoldKind.BOOKING, booking__isnull=False, maintenance__isnull=True,
                             team__isnull=False, booker__isnull=False)
                    | models.Q(kind=HoldKind.MAINTENANCE, maintenance__isnull=False, booking__isnull=True)
                ),
                name="gpu_hold_has_one_owner",
            ),
            models.CheckConstraint(condition=~models.Q(during__isempty=True), name="gpu_hold_not_empty"),
        ]

    def __str__(self) -> str:
        return f"{self.gpu_id} {self.during}"


class TeamBookingPolicy(models.Model):
    """One team's overrides of the booking limits in settings; an empty field keeps the setting."""

    team = models.OneToOneField(
        "teams.Team", on_delete=models.CASCADE, primary_key=True, related_name="booking_policy",
        verbose_name=_("team"),
    )
    max_hours = models.PositiveIntegerField(_("longest booking (hours)"), null=True, blank=True)
    max_days_ahead = models.PositiveIntegerField(_("how far ahead (days)"), null=True, blank=True)
    max_gpus_per_booking = models.PositiveIntegerField(_("GPUs per booking"), null=True, blank=True)
    max_gpus_held = models.PositiveIntegerField(
        _("GPUs held at once"), null=True, blank=True, help_text=_("Most GPUs the team's bookings may hold at any moment."),
    )
    idle_warn_minutes = models.PositiveIntegerField(
        _("warn after idle (minutes)"), null=True, blank=True, help_text=_("0 turns idle warnings off."),
    )
    idle_release_minutes = models.PositiveIntegerField(
        _("release after idle (minutes)"), null=True, blank=True, help_text=_("0 turns idle release off."),
    )

    class Meta:
        verbose_name = _("team booking policy")
        verbose_name_plural = _("team booking policies")

    def __str__(self) -> str:
        return f"{self.team}"


class GuaranteeDays(models.TextChoices):
    """The days of the week a guarantee's hours apply on (Monday is 0)."""

    EVERY_DAY = "every_day", _("Every day")
    WEEKDAYS = "weekdays", _("Monday to Friday")

    @property
    def weekdays(self) -> frozenset[int]:
        return frozenset(range(5)) if self == GuaranteeDays.WEEKDAYS else frozenset(range(7))


class TeamGuarantee(models.Model):
    """A team's guaranteed share of one GPU model: ``gpus`` that other teams' bookings may not take, always,
    or only on ``days`` from ``start_time`` to ``end_time`` in the business time zone."""

    team = models.ForeignKey("teams.Team", on_delete=models.CASCADE, related_name="guarantees", verbose_name=_("team"))
    gpu_model = models.ForeignKey(GpuModel, on_delete=models.PROTECT, related_name="+", verbose_name=_("GPU model"))
    gpus = models.PositiveIntegerField(_("guaranteed GPUs"))
    days = models.CharField(_("days"), max_length=16, choices=GuaranteeDays.choices, default=GuaranteeDays.EVERY_DAY)
    start_time = models.TimeField(
        _("from (local time)"), null=True, blank=True,
        help_text=_("In the business time zone. Leave both times empty for a guarantee that always applies."),
    )
    end_time = models.TimeField(_("until (local time)"), null=True, blank=True)

    class Meta:
        ordering = ["team__name", "gpu_model__short_name"]
        verbose_name = _("guaranteed share")
        verbose_name_plural = _("guaranteed shares")
        constraints = [
            models.UniqueConstraint(
                fields=["team", "gpu_model"], name="guarantee_one_per_team_and_model",
                violation_error_message=_("The team already has a guaranteed share of this GPU model."),
            ),
            models.CheckConstraint(
                condition=models.Q(gpus__gte=1), name="guarantee_holds_a_gpu",
                violation_error_message=_("A guarantee holds at least one GPU."),
            ),
            models.CheckConstraint(
                condition=models.Q(start_time__isnull=True, end_time__isnull=True)
                | models.Q(start_time__isnull=False, end_time__isnull=False, end_time__gt=models.F("start_time")),
                name="guarantee_hours_both_or_none",
                violation_error_message=_("Give both times, the end after the start (within one day), or neither."),
            ),
            models.CheckConstraint(condition=models.Q(days__in=GuaranteeDays.values), name="guarantee_known_days"),
        ]

    def __str__(self) -> str:
        return f"{self.team} {self.gpus} × {self.gpu_model.short_name}"

    @property
    def always(self) -> bool:
        return self.start_time is None and self.days == GuaranteeDays.EVERY_DAY

    @property
    def hours_label(self) -> str:
        return guarantee_hours_label(self.days, self.start_time, self.end_time)


def guarantee_hours_label(days: str, start, end) -> str:
    """``always``, or ``Monday to Friday 09:00–18:00`` (business zone), for messages and pages."""
    if start is None:
        return str(_("always")) if days == GuaranteeDays.EVERY_DAY else str(GuaranteeDays(days).label)
    return f"{GuaranteeDays(days).label} {start:%H:%M}–{end:%H:%M}"
