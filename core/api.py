"""API plumbing shared by every app and knowing no domain: the error shape (handler and schema), the
aware date-time field of every time in the API, and query-form errors in DRF's shape."""

from datetime import datetime

from django.db import models
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext_lazy as _
from rest_framework import serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.views import exception_handler as drf_exception_handler

from core.html import json_bytes
from core.timewindow import OutsideWindow, check_in_window, in_window, rfc3339_utc, window_message


def exception_handler(exc, context):
    """DRF's handler, with every error body carrying ``detail`` so clients have one place to look.

    Validation errors keep DRF's per-field lists (``{"hostname": ["…"]}``) and gain a ``detail`` line
    that names each field and its rule.
    """
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    data = response.data
    if isinstance(data, dict) and "detail" not in data:
        parts = []
        for field, messages in data.items():
            text = " ".join(str(m) for m in messages) if isinstance(messages, list) else str(messages)
            parts.append(f"{field}: {text}")
        response.data = {"detail": "; ".join(parts), **data}
    elif isinstance(data, list):
        response.data = {"detail": " ".join(str(m) for m in data), "errors": data}
    return response


def form_errors(form) -> dict[str, list[str]]:
    """A Django form's errors in DRF's shape, for query-parameter forms shared with HTML pages."""
    return {field: [error["message"] for error in errors] for field, errors in form.errors.get_json_data().items()}


class AwareDateTimeField(serializers.DateTimeField):
    """ISO-8601 with a UTC offset, in the supported time window (core.timewindow); a time without an
    offset is refused rather than guessed in some zone. Shown as RFC 3339: in the display zone, or in
    UTC (``…Z``) for a stored time outside the window, whose local offset would be a local mean time."""

    default_error_messages = {
        "naive": _("A time needs a UTC offset: write ISO-8601 such as 2026-11-02T08:00:00+00:00 or …Z."),
    }

    def to_internal_value(self, value):
        if isinstance(value, str):
            try:
                parsed = parse_datetime(value.strip())
            except ValueError:
                parsed = None  # DRF reports the format error
            if parsed is not None and timezone.is_naive(parsed):
                self.fail("naive")
            if parsed is not None:
                self.check_window(parsed)  # before DRF moves it into the display zone (which can overflow)
        elif isinstance(value, datetime) and timezone.is_aware(value):
            self.check_window(value)
        return super().to_internal_value(value)

    def check_window(self, moment: datetime) -> None:
        try:
            check_in_window(moment, field=self.field_name or "time")
        except OutsideWindow as error:
            raise serializers.ValidationError(window_message(error)) from None

    def to_representation(self, value):
        if isinstance(value, datetime) and timezone.is_aware(value) and not in_window(value):
            return rfc3339_utc(value)
        return super().to_representation(value)

class WindowedModelSerializer(serializers.ModelSerializer):
    """A model serializer whose date-times are :class:`AwareDateTimeField`: valid RFC 3339 whatever is stored."""

    serializer_field_mapping = {**serializers.ModelSerializer.serializer_field_mapping,
                                models.DateTimeField: AwareDateTimeField}

class ApiErrorSerializer(serializers.Serializer):
    """The error body: ``detail`` names each field and its rule; a 400 also lists messages under each field."""

    detail = serializers.CharField(help_text=_("e.g. “end_time: is before start_time”."))


class FastJSONRenderer(JSONRenderer):
    """DRF's JSON renderer written by orjson (:func:`core.html.json_bytes`), for answers of megabytes (the
    daily board's: 2 MB at 1,000 GPUs). The same JSON values; compact, UTF-8."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return b"" if data is None else json_bytes(data)
