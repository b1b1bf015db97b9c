"""The usage report in the API: ``GET /api/v1/reports/usage/?start=&end=&by=&format=`` (accounting.usage.report),
role-scoped, as JSON or as a CSV or XLSX download.

``format`` names the file format here (json, csv, xlsx), the same parameter as the command's ``--format``;
DRF would read it as its renderer override (URL_FORMAT_OVERRIDE), so this view skips DRF's content
negotiation: its JSON answers and errors use the JSON renderer, files are plain downloads."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import permissions, serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from accounting.money.exports import XLSX_MEDIA_TYPE, download_response
from accounting.usage.report import BY_CHOICES, TIME_COLUMNS, usage_report, window_problems
from core.api import ApiErrorSerializer, AwareDateTimeField
from core.timeutils import business_day_of

FORMATS = ("json", "csv", "xlsx")


class UsageReportQuerySerializer(serializers.Serializer):
    """The report's parameters: the window ``[start, end)``, the grouping and the file format."""

    start = AwareDateTimeField(help_text=_("First instant: ISO-8601 with a UTC offset, on a whole minute, e.g. "
                                           "2026-11-01T00:00:00+08:00 (write + as %2B in a URL, or use Z)."))
    end = AwareDateTimeField(help_text=_("The instant after the last (exclusive); after start, at most 400 days "
                                         "later."))
    by = serializers.ChoiceField(choices=BY_CHOICES, default="team", help_text=_(
        "One row per team, per (team, project), per GPU model, per node or per GPU."))
    format = serializers.ChoiceField(choices=FORMATS, default="json", help_text=_(
        "json (the rows), or csv / xlsx as a download with the same columns."))

    def validate(self, attrs):
        problems: dict[str, list[str]] = {}
        for field, message in window_problems(start=attrs["start"], end=attrs["end"]):
            problems.setdefault(field, []).append(message)
        if problems:
            raise serializers.ValidationError(problems)
        return attrs


class UsageReportSerializer(serializers.Serializer):
    """The JSON answer. Card-hours are decimal strings with 4 places; times ISO-8601 in the business zone."""

    columns = serializers.ListField(child=serializers.CharField(), help_text=_(
        "start, end, team, cost_centre, project, gpu_model, card_hours_allocated, card_hours_busy, card_hours_idle, "
        "card_hours_unmeasured, card_hours_unallocated, card_hours_down, capacity_card_hours, data_complete_to; "
        "by node or GPU, `node` or `gpu` follows `gpu_model`."))
    rows = serializers.ListField(child=serializers.DictField(allow_null=True), help_text=_(
        "One object per row, keyed by the columns."))
    data_complete_to = serializers.DateTimeField(allow_null=True, help_text=_(
        "The figures are complete up to this instant (null: some node has never been collected)."))
    pending_buckets = serializers.IntegerField(help_text=_(
        "Rollup buckets and usage change marks over the window that the worker has not processed yet: while "
        "above 0, the figures after pending_from may change."))
    pending_from = serializers.DateTimeField(allow_null=True, help_text=_(
        "The earliest instant in the window that pending work concerns (null: none pending)."))


class UsageReportView(APIView):
    """Card-hours over ``[start, end)``: leads and engineers see their teams' rows, admin and finance every
    team's; model, node and GPU rows are cluster-wide figures that every signed-in role sees."""

    permission_classes = [permissions.IsAuthenticated]
    renderer_classes = [JSONRenderer]

    def perform_content_negotiation(self, request, force=False):
        # `format` is this view's file format, not DRF's renderer override (see the module docstring).
        renderer = self.get_renderers()[0]
        return renderer, renderer.media_type

    @extend_schema(
        parameters=[UsageReportQuerySerializer],
        responses={
            (200, "application/json"): UsageReportSerializer,
            (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description=_("format=csv: a CSV download.")),
            (200, XLSX_MEDIA_TYPE): OpenApiResponse(OpenApiTypes.BINARY, description=_("format=xlsx: a download.")),
            400: OpenApiResponse(ApiErrorSerializer, description=_(
                "A parameter is missing or breaks a rule (offset, whole minute, end after start, at most 400 days, "
                "unknown grouping or format); `detail` names it.")),
        },
        description=_(
            "The usage report of issue 6: card-hours allocated, busy, idle and unmeasured per team or project "
            "(unplaced jobs count as unmeasured), and per GPU model, node or GPU also unallocated, down and "
            "capacity; each row adds up exactly. Whole business days come from the daily aggregates, partial "
            "days are computed to the minute."
        ),
    )
    def get(self, request):
        query = UsageReportQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        asked = query.validated_data
        report = usage_report(start=asked["start"], end=asked["end"], by=asked["by"], user=request.user)
        if asked["format"] == "json":
            return Response(report.as_json())
        filename = (f"usage-{asked['by']}-{business_day_of(asked['start']).isoformat()}-"
                    f"{business_day_of(asked['end']).isoformat()}.{asked['format']}")
        response = download_response(report.columns, report.rows, file_format=asked["format"], filename=filename,
                                     sheet_title=f"usage by {asked['by']}", time_columns=TIME_COLUMNS)
        response["X-Cardhour-Pending-Buckets"] = str(report.pending_buckets)  # the files' columns stay the report's
        return response
