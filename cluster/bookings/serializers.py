"""Bookings in the API: the row a reader sees, the request that books, the end a PATCH moves, the list's
filters and the availability question (DESIGN.md §6).

Writes go through ``cluster.bookings.services``; these serializers only read the request and resolve names
(team, project, booker, GPU model, GPUs, node), so an unknown name is a 400 naming its field. The
booking rules themselves (grid, limits, who books for whom, overlap) are the services'.
"""

from __future__ import annotations

import re

from django.contrib.auth import get_user_model
from django.db.models import Prefetch, Q
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from cluster.bookings.services import booking_limits
from cluster.bookings.slots import window_problems
from cluster.choices import GpuStatus
from cluster.inventory.serializers import InventoryNameFields, find_gpu_model
from cluster.models import Booking, BookingStatus, Gpu, GpuHold, TeamGuarantee
from core.api import AwareDateTimeField, JsonText, WindowedModelSerializer
from teams.models import Project, Team

MAX_NAMED_GPUS = 256
_GPU_NAME = re.compile(r"^([A-Za-z0-9.-]+)/(\d{1,5})$")


def with_holds(bookings):
    """Bookings with what a row shows (team, project, people, model, node, held GPUs) in two queries."""
    holds = GpuHold.objects.select_related("gpu__node").order_by("gpu__node__hostname", "gpu__index", "pk")
    return bookings.select_related("team", "project", "booker", "created_by", "gpu_model", "node").prefetch_related(
        Prefetch("holds", queryset=holds)
    )


class GpuRefSerializer(serializers.Serializer):
    """A GPU as bookings name it."""

    id = serializers.IntegerField()
    name = serializers.CharField(help_text=_("host/index, e.g. h200-a/0."))
    node = serializers.CharField(help_text=_("The node's hostname."))


def gpu_ref(gpu: Gpu) -> dict:
    return {"id": gpu.pk, "name": f"{gpu.node.hostname}/{gpu.index}", "node": gpu.node.hostname}


class BookingSerializer(WindowedModelSerializer):
    """A booking as the API shows it; ``gpus`` are the GPUs it holds (a cancelled one: the GPUs it held)."""

    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    project = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    booker = serializers.SlugRelatedField(
        slug_field="username", read_only=True, help_text=_("Username of the person the GPUs are for."),
    )
    created_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True, help_text=_("Username of the person who booked."),
    )
    gpu_model = serializers.SlugRelatedField(slug_field="short_name", read_only=True, allow_null=True)
    node = serializers.SlugRelatedField(
        slug_field="hostname", read_only=True, allow_null=True, help_text=_("Set when a whole node was booked."),
    )
    gpus = serializers.SerializerMethodField()

    class Meta:
        model = Booking
        fields = [
            "id", "team", "project", "booker", "created_by", "mode", "gpu_model", "node", "gpu_count", "gpus",
            "start", "end", "booked_end", "status", "note", "created_at", "closed_at",
        ]
        read_only_fields = fields

    @extend_schema_field(GpuRefSerializer(many=True))
    def get_gpus(self, booking) -> list[dict]:
        holds = list(booking.holds.all())
        active = [hold for hold in holds if hold.active]
        shown = holds if booking.status == BookingStatus.CANCELLED or not active else active
        return [gpu_ref(hold.gpu) for hold in shown]


@extend_schema_field(
    {
        "type": "array",
        "items": {"oneOf": [{"type": "integer"}, {"type": "string", "example": "h200-a/0"}]},
        "description": "GPU ids, or names written host/index.",
    }
)
class GpuListField(serializers.Field):
    """GPUs named by id (``12``) or ``host/index`` (``h200-a/0``), resolved to whole GPUs in one query each way."""

    default_error_messages = {
        "invalid": _("A list of GPU ids or names written host/index, e.g. [12, \"h200-a/0\"]."),
        "too_many": _("At most {max} GPUs."),
        "unknown": _("Unknown GPU {names}."),
    }

    def to_internal_value(self, data) -> list[Gpu]:
        if not isinstance(data, list):
            self.fail("invalid")
        if not data:
            return []  # as if left out: a model and count, or a node, says what to book
        if len(data) > MAX_NAMED_GPUS:
            self.fail("too_many", max=MAX_NAMED_GPUS)
        keys: list[int | tuple[str, int]] = []
        for item in data:
            if isinstance(item, int) and not isinstance(item, bool):
                keys.append(item)
            elif isinstance(item, str) and item.strip().isdigit():
                keys.append(int(item.strip()))
            elif isinstance(item, str) and (match := _GPU_NAME.match(item.strip())):
                keys.append((match[1], int(match[2])))
            else:
                self.fail("invalid")
        found = self._lookup(keys)
        unknown = [self._label(key) for key in keys if key not in found]
        if unknown:
            self.fail("unknown", names=", ".join(unknown))
        return [found[key] for key in keys]

    @staticmethod
    def _label(key) -> str:
        return f"{key[0]}/{key[1]}" if isinstance(key, tuple) else f"#{key}"

    @staticmethod
    def _lookup(keys) -> dict:
        ids = [key for key in keys if isinstance(key, int)]
        names = Q()
        for hostname, index in (key for key in keys if isinstance(key, tuple)):
            names |= Q(node__hostname=hostname, index=index)
        whole = Gpu.objects.filter(mig_parent__isnull=True).select_related("node", "model")
        found: dict = {}
        if ids:
            found.update({gpu.pk: gpu for gpu in whole.filter(pk__in=ids)})
        if names:
            # A replaced GPU keeps its (host, index) row as retired: prefer the one in service.
            rank = {GpuStatus.ACTIVE: 0, GpuStatus.MAINTENANCE: 1, GpuStatus.MISSING: 2}
            for gpu in sorted(whole.filter(names), key=lambda g: (rank.get(g.status, 3), -g.pk)):
                found.setdefault((gpu.node.hostname, gpu.index), gpu)
        return found

    def to_representation(self, value):
        return [gpu_ref(gpu) for gpu in value]


class BookingCreateSerializer(JsonText, InventoryNameFields, serializers.Serializer):
    """A booking request: the team, the time range, and one of a GPU model with a count, named GPUs, or a node.

    ``validated_data`` holds the keywords of ``cluster.bookings.services.booking_create`` (less ``user``)."""

    team = serializers.SlugRelatedField(
        slug_field="slug", queryset=Team.objects.all(), help_text=_("Team slug."),
        error_messages={"does_not_exist": _("Unknown team “{value}”.")},
    )
    project = serializers.CharField(
        max_length=50, required=False, allow_blank=True, allow_null=True, help_text=_("Project slug in the team."),
    )
    booker = serializers.CharField(
        max_length=150, required=False, allow_blank=True, allow_null=True,
        help_text=_("Username of the person the GPUs are for (a lead books for anyone in the team). "
                    "Default: the caller."),
    )
    start = AwareDateTimeField(help_text=_("ISO-8601 with a UTC offset, on the 30-minute grid."))
    end = AwareDateTimeField(help_text=_("ISO-8601 with a UTC offset, on the 30-minute grid."))
    gpu_model = serializers.CharField(
        max_length=100, required=False, allow_blank=True, allow_null=True,
        help_text=_("GPU model short name or NVML name; with count: the system picks the GPUs."),
    )
    count = serializers.IntegerField(required=False, allow_null=True, min_value=1, help_text=_("GPUs of gpu_model."))
    gpus = GpuListField(required=False, allow_null=True, help_text=_("Named GPUs: ids or host/index."))
    node = serializers.CharField(
        max_length=253, required=False, allow_blank=True, allow_null=True,
        help_text=_("Hostname: book every GPU of the node."),
    )
    note = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")

    def validate_booker(self, username):
        if not username:
            return None
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise serializers.ValidationError(_("Unknown user “%(user)s”.") % {"user": username})
        return user

    def validate(self, attrs):
        team, slug = attrs["team"], attrs.get("project")
        attrs["project"] = None
        if slug:
            attrs["project"] = Project.objects.filter(team=team, slug=slug).first()
            if attrs["project"] is None:
                raise serializers.ValidationError({"project": [
                    _("Unknown project “%(project)s” in team “%(team)s”.") % {"project": slug, "team": team.slug}
                ]})
        if attrs.get("count") is not None and attrs.get("gpu_model") is None:
            raise serializers.ValidationError({"count": [_("goes with gpu_model; named GPUs and nodes count themselves.")]})
        return attrs


class BookingEndSerializer(JsonText, serializers.Serializer):
    """What a PATCH may change: the end (extend when the GPUs are free, or shorten)."""

    end = AwareDateTimeField(help_text=_("The new end: ISO-8601 with a UTC offset, on the 30-minute grid."))

    def to_internal_value(self, data):
        if isinstance(data, dict):
            fixed = sorted(name for name in data if name not in self.fields)
            if fixed:
                raise serializers.ValidationError(
                    {name: [_("cannot be changed: only end can; cancel and book again instead.")] for name in fixed}
                )
        return super().to_internal_value(data)


class BookingFilterSerializer(serializers.Serializer):
    """The booking list's query parameters; every one optional, an unknown value is a 400 naming it."""

    team = serializers.CharField(required=False, allow_blank=True, help_text=_("Team slug."))
    status = serializers.ChoiceField(choices=BookingStatus.choices, required=False, allow_blank=True)
    mine = serializers.BooleanField(required=False, default=False, help_text=_("Only bookings made for the caller."))
    start_after = AwareDateTimeField(required=False, allow_null=True, help_text=_("Bookings that start at or after."))
    start_before = AwareDateTimeField(required=False, allow_null=True, help_text=_("Bookings that start before."))

    def validate_team(self, slug):
        if slug and not Team.objects.visible_to(self.context["request"].user).filter(slug=slug).exists():
            raise serializers.ValidationError(_("Unknown team “%(team)s”.") % {"team": slug})
        return slug

    def filter(self, bookings):
        """Apply the validated filters; call after ``is_valid()``."""
        data = self.validated_data
        lookups = {"team__slug": "team", "status": "status", "start__gte": "start_after", "start__lt": "start_before"}
        for lookup, name in lookups.items():
            if data.get(name) not in (None, ""):
                bookings = bookings.filter(**{lookup: data[name]})
        if data.get("mine"):
            bookings = bookings.filter(booker=self.context["request"].user)
        return bookings


class AvailabilityQuerySerializer(serializers.Serializer):
    """The availability question: ``count`` GPUs of ``model`` for the length of ``[start, end)``, from ``start`` on."""

    model = serializers.CharField(max_length=100, help_text=_("GPU model short name or NVML name."))
    count = serializers.IntegerField(min_value=1, max_value=MAX_NAMED_GPUS, default=1)
    start = AwareDateTimeField(help_text=_("Earliest start: ISO-8601 with a UTC offset, on the 30-minute grid."))
    end = AwareDateTimeField(help_text=_("End of the first slot tried; later slots keep its length."))
    team = serializers.CharField(
        required=False, allow_blank=True, help_text=_("Team slug: search within that team's booking limits."),
    )

    def validate_model(self, name):
        model = find_gpu_model(name)
        if model is None:
            raise serializers.ValidationError(_("Unknown GPU model “%(name)s”.") % {"name": name})
        return model

    def validate_team(self, slug):
        if not slug:
            return None
        team = Team.objects.visible_to(self.context["request"].user).filter(slug=slug).first()
        if team is None:
            raise serializers.ValidationError(_("Unknown team “%(team)s”.") % {"team": slug})
        return team

    def validate(self, attrs):
        attrs.setdefault("team", None)
        limits = booking_limits(attrs["team"])
        problems: dict[str, list[str]] = {}
        for field, message in window_problems(start=attrs["start"], end=attrs["end"], now=timezone.now(), limits=limits):
            problems.setdefault(field, []).append(message)
        if problems:
            raise serializers.ValidationError(problems)
        return attrs


class SlotSerializer(serializers.Serializer):
    start = AwareDateTimeField()
    end = AwareDateTimeField()


class AvailabilityRequestedSerializer(serializers.Serializer):
    start = AwareDateTimeField()
    end = AwareDateTimeField()
    count = serializers.IntegerField()
    model = serializers.CharField(help_text=_("GPU model short name."))


class AvailabilitySerializer(serializers.Serializer):
    """The earliest slot for the request, the GPUs a booking would take there, and every GPU free in it."""

    requested = AvailabilityRequestedSerializer()
    slot = SlotSerializer(allow_null=True, help_text=_("Null: no slot within the booking horizon."))
    gpus = GpuRefSerializer(many=True, help_text=_("The GPUs a booking by model would take in the slot."))
    free_gpus = GpuRefSerializer(many=True, help_text=_("Every GPU of the model free in the slot."))
    total = serializers.IntegerField(help_text=_("Bookable GPUs of the model on nodes that are up."))


class GuaranteeSerializer(serializers.ModelSerializer):
    """A team's guaranteed share of a GPU model (issue 19), read-only: the admin site manages them."""

    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    gpu_model = serializers.SlugRelatedField(slug_field="short_name", read_only=True)
    hours = serializers.CharField(source="hours_label", read_only=True,
                                  help_text=_("When it applies, in the business time zone."))

    class Meta:
        model = TeamGuarantee
        fields = ["id", "team", "gpu_model", "gpus", "days", "start_time", "end_time", "hours"]
        read_only_fields = fields
