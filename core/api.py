"""API plumbing shared by every app and knowing no domain: the error shape (handler and schema), the
aware date-time field of every time in the API, text fields that take only text, decimals as the schema
writes them, and query-form errors in DRF's shape."""

from collections import Counter
from collections.abc import Mapping
from datetime import datetime

from django.db import models
from django.db.models import ProtectedError, RestrictedError
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.translation import gettext_lazy as _
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from rest_framework import serializers, status
from rest_framework.exceptions import ParseError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.settings import api_settings

from core.html import json_bytes
from core.timewindow import OutsideWindow, check_in_window, in_window, rfc3339_utc, window_message


def exception_handler(exc, context):
    """DRF's handler, with every error body carrying ``detail`` so clients have one place to look.

    Validation errors keep DRF's per-field lists (``{"hostname": ["…"]}``) and gain a ``detail`` line
    that names each field and its rule.
    """
    # Imported here: rest_framework.views reads DEFAULT_PARSER_CLASSES when it is imported, and those name
    # this module's parser, so importing it at the top would be circular.
    from rest_framework.views import exception_handler as drf_exception_handler

    if isinstance(exc, ProtectedError | RestrictedError):
        return protected_response(exc)
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

DECIMAL_AS_TEXT = _("A decimal is sent as a JSON string, as the API shows it: \"8\" or \"18.50\", not 8 or 18.5.")


class JsonText:
    """A serializer mixin: its text fields, and its decimals (strings in the schema), take JSON strings only.
    DRF's ``CharField`` (and its slug, e-mail, URL and regex kin) reads the number 5 as "5", and its
    ``DecimalField`` the float 0.1 as 0.1000000000000000055…, neither of which the schema's ``type: string``
    allows; a client that sends a number there has a bug it should hear about (issue 17, found by Schemathesis)."""

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            wrong = {field.field_name: [DECIMAL_AS_TEXT if isinstance(field, serializers.DecimalField)
                                        else serializers.CharField.default_error_messages["invalid"]]
                     for field in self._writable_fields
                     if isinstance(field, serializers.CharField | serializers.DecimalField)
                     and data.get(field.field_name) is not None and not isinstance(data[field.field_name], str)}
            if wrong:
                raise serializers.ValidationError(wrong)
        return super().to_internal_value(data)


class ZeroOrMoreDecimalField(serializers.DecimalField):
    """A decimal that must be zero or more, said so in the schema (no sign in its pattern), where the rule
    itself is checked by a service that names it with the write's other problems (so no ``min_value``)."""


class DecimalText(OpenApiSerializerFieldExtension):
    """A decimal sent and shown as a string, in the schema as DRF reads it. drf-spectacular's pattern
    (``^-?\\d{0,6}(?:\\.\\d{0,4})?$``) also admits "", "-" and ".", which DRF refuses, and a minus sign where
    ``min_value`` forbids one; this one needs a digit and has a sign only where a negative value may be."""

    target_class = serializers.DecimalField
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction):
        field = self.target
        if not getattr(field, "coerce_to_string", api_settings.COERCE_DECIMAL_TO_STRING):
            return auto_schema._map_serializer_field(field, direction, bypass_extensions=True)
        whole = r"\d+" if field.max_whole_digits is None else (
            "0" if field.max_whole_digits == 0 else rf"\d{{1,{field.max_whole_digits}}}")
        zero_or_more = isinstance(field, ZeroOrMoreDecimalField) or (field.min_value is not None and field.min_value >= 0)
        sign = "" if zero_or_more else "-?"
        if field.decimal_places:
            places = field.decimal_places
            number = rf"(?:{whole}(?:\.\d{{0,{places}}})?|\.\d{{1,{places}}})"
        else:
            number = whole
        return {"type": "string", "format": "decimal", "pattern": f"^{sign}{number}$"}


class ApiErrorSerializer(serializers.Serializer):
    """The error body: ``detail`` names each field and its rule; a 400 also lists messages under each field."""

    detail = serializers.CharField(help_text=_("e.g. “end_time: is before start_time”."))


class FastJSONRenderer(JSONRenderer):
    """DRF's JSON renderer written by orjson (:func:`core.html.json_bytes`), for answers of megabytes (the
    daily board's: 2 MB at 1,000 GPUs). The same JSON values; compact, UTF-8."""

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return b"" if data is None else json_bytes(data)


# ---- page size, parsing and refusals every endpoint shares (issue 17) ------------------------------------------

MAX_PAGE_SIZE = 1000
MAX_OFFSET = 2**31 - 1  # beyond it PostgreSQL's OFFSET is out of range; no list holds that many rows
MAX_JSON_DEPTH = 32  # no request body of the API nests deeper than 3 levels


class CappedLimitOffsetPagination(LimitOffsetPagination):
    """``?limit=`` (1 to :data:`MAX_PAGE_SIZE`, default ``PAGE_SIZE``) and ``?offset=`` (0 or more): a value
    out of range, or not a whole number, is a 400 that names the parameter and its rule, not silently clamped
    (DRF's own) nor a 500 from the database (``?limit=10**20`` is out of bigint's range)."""

    def get_limit(self, request):
        raw = request.query_params.get(self.limit_query_param)
        if not raw:  # absent or empty, as every optional parameter of the API
            return self.default_limit
        return self._whole(raw, self.limit_query_param, 1, MAX_PAGE_SIZE)

    def get_offset(self, request):
        raw = request.query_params.get(self.offset_query_param)
        return self._whole(raw, self.offset_query_param, 0, MAX_OFFSET) if raw else 0

    @staticmethod
    def _whole(raw: str, name: str, low: int, high: int) -> int:
        text = raw.strip()
        if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
            raise serializers.ValidationError({name: [_("A whole number from %(low)s to %(high)s.") % {
                "low": low, "high": high}]})
        return int(text)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.limit_query_param:
                parameter["schema"].update(minimum=1, maximum=MAX_PAGE_SIZE)
                parameter["description"] = f"Rows per page, 1 to {MAX_PAGE_SIZE} (default {self.default_limit})."
            elif parameter["name"] == self.offset_query_param:
                parameter["schema"].update(minimum=0, maximum=MAX_OFFSET)
        return parameters


class StrictJSONParser(JSONParser):
    """DRF's JSON parser, refusing with a 400 what PostgreSQL or Python cannot take: a body nested deeper
    than :data:`MAX_JSON_DEPTH` (1,000 levels made the decoder raise ``RecursionError``) and a string
    holding a NUL character (``\\u0000``: no text column can store it, and a lookup by it failed in the
    driver)."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(_("JSON parse error: nested deeper than %(depth)s levels.") % {"depth": MAX_JSON_DEPTH}) from None
        _check_json(data)
        return data


def _check_json(data) -> None:
    pending = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, str):
            if "\x00" in value:
                raise ParseError(_("JSON parse error: text cannot hold a NUL character (\\u0000)."))
            continue
        if not isinstance(value, dict | list):
            continue
        if depth > MAX_JSON_DEPTH:
            raise ParseError(_("JSON parse error: nested deeper than %(depth)s levels.") % {"depth": MAX_JSON_DEPTH})
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and "\x00" in key:
                raise ParseError(_("JSON parse error: text cannot hold a NUL character (\\u0000)."))
            pending.append((item, depth + 1))


def protected_response(exc: ProtectedError | RestrictedError) -> Response:
    """409 for a delete that other rows still refer to, naming what kind of rows and how many (never which
    ones: they may be another team's)."""
    counts = Counter(type(obj) for obj in (
        exc.protected_objects if isinstance(exc, ProtectedError) else exc.restricted_objects))
    named = sorted((str(model._meta.verbose_name if count == 1 else model._meta.verbose_name_plural), count)
                   for model, count in counts.items())
    listed = ", ".join(f"{count} {name}" for name, count in named)
    return Response({"detail": _("Still referred to by %(listed)s: remove or reassign them first.") % {"listed": listed},
                     "referred_by": dict(named)},
                    status=status.HTTP_409_CONFLICT)


def document_errors(result, generator, request, public):
    """drf-spectacular post-processing: every operation documents its 400 (a bad parameter, page size or
    body), 401 (no or a bad token), 403 (not for the caller's role) and 429 (too many failed tokens) and,
    with a path parameter, its 404, as the API's error body, where it does not already; a DELETE its 409
    (still referred to) and a write its 413 (body too large). Optional query parameters allow an empty value.
    """
    error = {"description": "", "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ApiError"}}}}
    if "ApiError" not in result.get("components", {}).get("schemas", {}):
        return result
    for path, item in result.get("paths", {}).items():
        for method, operation in item.items():
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "query" and not parameter.get("required"):
                    # An optional parameter sent empty (``?date=``, as an HTML form sends an unfilled field)
                    # is read as absent: DRF's serializers, Django's forms and the page size alike.
                    parameter["allowEmptyValue"] = True
            responses = operation.setdefault("responses", {})
            wanted = {
                "400": "Bad input: the detail names each field or parameter and its rule (a name that must be a row's, "
                       "one time after another, dates and times within 2000–2100).",
                "401": "No credentials, or a token that is unknown, expired or revoked.",
                "403": "The caller's role may not do this.",
                "429": "Too many failed tokens from this address: wait for Retry-After seconds.",
            }
            if "{" in path:
                wanted["404"] = "Not found (or not visible to the caller: the same answer)."
            if method == "delete":
                wanted["409"] = "Still referred to by other rows: the detail counts them by kind."
            if method in ("post", "put", "patch"):
                wanted["413"] = "The body is larger than the server accepts."
            for code, text in wanted.items():
                responses.setdefault(code, {**error, "description": text})
    return result
