"""Statements in the API (issue 7, DESIGN.md §5): ``/api/v1/statements/``, role-scoped.

- ``GET statements/``: the statements with a line the caller sees (admin and finance: all), each with the
  total of the lines the caller sees.
- ``GET statements/{id}/?format=json|csv|xlsx``: a statement's lines and team totals
  (accounting.money.statements.statement_rows), or a download of them.
- ``GET statements/priced-usage/?period=2026-11&format=…``: what closing the month would book now.
- ``POST statements/close/`` and ``POST statements/reopen/``: finance and admins only.

Statements are costs: admin and finance see every team's, a lead the lines of the teams they lead, and
an engineer none: every statement endpoint answers an engineer 403 (DESIGN.md §2 gives engineers their
team's usage, which the usage report shows, and leads its costs). A lead asking for a statement with no
line of their teams gets 404, as for one that does not exist.

``format`` names the file format, as in accounting.usage.api (whose content-negotiation override
these GET views share)."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.utils.translation import gettext_lazy
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import generics, permissions, serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from accounting.models import Statement
from accounting.money.close import CloseRefused, close_period, parse_period, reopen_period
from accounting.money.exports import XLSX_MEDIA_TYPE, download_response, rows_as_json
from accounting.money.statements import (
    COLUMNS,
    closed_statement_id,
    period_label,
    priced_usage,
    sees_costs,
    statement_rows,
    statement_totals,
    statements_visible_to,
    total_of,
)
from core.api import ApiErrorSerializer, JsonText
from teams.roles import sees_all_teams

FORMATS = ("json", "csv", "xlsx")


class SeesCosts(permissions.BasePermission):
    message = gettext_lazy("Statements show costs: finance, admins and team leads see them; engineers see their "
                           "team's usage in the usage report.")

    def has_permission(self, request, view):
        return bool(request.user.is_authenticated and sees_costs(request.user))


class ClosesPeriods(permissions.BasePermission):
    message = gettext_lazy("Only finance or an admin closes and reopens a period.")

    def has_permission(self, request, view):
        return bool(request.user.is_authenticated and sees_all_teams(request.user))


# ---- serializers ---------------------------------------------------------------------------------------------

class StatementSerializer(serializers.ModelSerializer):
    """A statement; ``total`` is the sum of the lines the caller sees, a decimal string in ``currency``."""

    period = serializers.SerializerMethodField(help_text=gettext_lazy("The month, e.g. 2026-11."))
    total = serializers.SerializerMethodField(help_text=gettext_lazy(
        "Σ of the lines the caller sees (every line for admin and finance), a decimal string."))

    class Meta:
        model = Statement
        fields = ["id", "period", "revision", "status", "closed_at", "reopened_at", "reopen_reason", "currency", "total"]

    @extend_schema_field(OpenApiTypes.STR)
    def get_period(self, statement) -> str:
        return period_label(statement.period)

    @extend_schema_field(OpenApiTypes.STR)
    def get_total(self, statement) -> str:
        return format(self.context["totals"][statement.pk], "f")


# A month of the supported time window (2000–2100), as the schema states it (``\Z``, which the schema writes
# ``$``: Python's ``$`` would also match before a final newline); parse_period still checks it.
PERIOD_PATTERN = r"^20[0-9]{2}-(?:0[1-9]|1[0-2])\Z"


def _period_field():
    return serializers.RegexField(
        PERIOD_PATTERN, trim_whitespace=False, help_text=gettext_lazy("A month written YYYY-MM, e.g. 2026-11."),
        error_messages={"invalid": gettext_lazy(
            "A period is a month from 2000-01 to 2099-12 written YYYY-MM, e.g. 2026-11.")})


def _validated_period(text: str):
    try:
        return parse_period(text)
    except ValueError as error:
        raise serializers.ValidationError(str(error)) from None


class FormatQuerySerializer(serializers.Serializer):
    format = serializers.ChoiceField(choices=FORMATS, default="json", help_text=gettext_lazy(
        "json (the rows), or csv / xlsx as a download with the same columns."))


class PricedUsageQuerySerializer(FormatQuerySerializer):
    period = _period_field()

    def validate_period(self, value):
        return _validated_period(value)


class CloseSerializer(JsonText, serializers.Serializer):
    period = _period_field()

    def validate_period(self, value):
        return _validated_period(value)


class ReopenSerializer(CloseSerializer):
    reason = serializers.CharField(help_text=gettext_lazy("Why the period is reopened (kept on the statement)."))


class _RowsSerializer(serializers.Serializer):
    columns = serializers.ListField(child=serializers.CharField(), help_text=", ".join(COLUMNS))
    rows = serializers.ListField(child=serializers.DictField(allow_null=True), help_text=gettext_lazy(
        "One object per row keyed by the columns: card_hours, rate, exact_rate and amount are decimal strings, "
        "ticks an integer (millijoules on energy lines), reversals negative; after each team's lines a row of "
        "kind `total` with its card_hours, ticks and amount."))


class StatementRowsSerializer(_RowsSerializer):
    statement = StatementSerializer()


class PricedUsageSerializer(_RowsSerializer):
    period = serializers.CharField()
    unpriced = serializers.ListField(child=serializers.CharField(), help_text=gettext_lazy(
        "Usage with no rate card (it has no row): what a close would be refused for."))


class CloseRefusedSerializer(serializers.Serializer):
    detail = serializers.CharField()
    problems = serializers.ListField(child=serializers.CharField(), help_text=gettext_lazy("Every reason, one each."))


FORBIDDEN = {403: OpenApiResponse(ApiErrorSerializer, description=gettext_lazy(
    "Engineers (statements are costs; they see usage), or not signed in."))}
CLOSE_FORBIDDEN = {403: OpenApiResponse(ApiErrorSerializer, description=gettext_lazy("Only finance and admins."))}
BAD_INPUT = {400: OpenApiResponse(ApiErrorSerializer, description=gettext_lazy(
    "A parameter is missing or breaks a rule; `detail` names it."))}
REFUSED = {409: OpenApiResponse(CloseRefusedSerializer, description=gettext_lazy(
    "Refused: `problems` lists every reason (incomplete data, usage with no price, not closed)."))}
DOWNLOADS = {
    (200, "text/csv"): OpenApiResponse(OpenApiTypes.STR, description=gettext_lazy("format=csv: a CSV download.")),
    (200, XLSX_MEDIA_TYPE): OpenApiResponse(OpenApiTypes.BINARY, description=gettext_lazy("format=xlsx: a download.")),
}


# ---- views ---------------------------------------------------------------------------------------------------

class _FileFormatView(APIView):
    renderer_classes = [JSONRenderer]

    def perform_content_negotiation(self, request, force=False):
        # `format` is this view's file format, not DRF's renderer override (see accounting.usage.api).
        renderer = self.get_renderers()[0]
        return renderer, renderer.media_type

    @staticmethod
    def download(rows, *, file_format: str, name: str, sheet_title: str) -> HttpResponse:
        return download_response(COLUMNS, rows, file_format=file_format, filename=f"{name}.{file_format}",
                                 sheet_title=sheet_title)


def _rows_json(rows) -> dict:
    body = rows_as_json(COLUMNS, rows)
    return {"columns": body["columns"], "rows": body["rows"]}


class StatementListView(generics.ListAPIView):
    """Statements with a line the caller sees, newest period first."""

    serializer_class = StatementSerializer
    permission_classes = [SeesCosts]

    def get_queryset(self):
        return statements_visible_to(self.request.user).order_by("-period", "-revision")

    @extend_schema(responses={200: StatementSerializer(many=True), **FORBIDDEN}, description=gettext_lazy(
        "The statements with a line of a team the caller sees (admin and finance: all), each with the total "
        "of those lines. Engineers: 403."))
    def get(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        totals = statement_totals(page, user=request.user)
        data = StatementSerializer(page, many=True, context={"totals": totals}).data
        return self.get_paginated_response(data)


class StatementDetailView(_FileFormatView):
    permission_classes = [SeesCosts]

    @extend_schema(
        parameters=[FormatQuerySerializer],
        responses={
            (200, "application/json"): StatementRowsSerializer, **DOWNLOADS, **BAD_INPUT, **FORBIDDEN,
            404: OpenApiResponse(ApiErrorSerializer, description=gettext_lazy(
                "No statement has this id, or none with a line of a team the caller leads.")),
        },
        description=gettext_lazy(
            "A statement's lines per team, project, GPU model, kind and rate interval (reversals as negative "
            "lines), with a totals row per team: the lines the caller sees. CSV and XLSX have the same columns; "
            "the file is named statement-2026-11-r1.csv."),
    )
    def get(self, request, pk: int):
        query = FormatQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        statement = get_object_or_404(statements_visible_to(request.user), pk=pk)
        rows = statement_rows(statement, user=request.user)
        file_format = query.validated_data["format"]
        label = f"{period_label(statement.period)} r{statement.revision}"
        if file_format == "json":
            context = {"totals": {statement.pk: total_of(rows, currency=statement.currency)}}
            return Response({"statement": StatementSerializer(statement, context=context).data, **_rows_json(rows)})
        return self.download(rows, file_format=file_format, name=f"statement-{label.replace(' ', '-')}",
                             sheet_title=f"Statement {label}")


class PricedUsageView(_FileFormatView):
    permission_classes = [SeesCosts]

    @extend_schema(
        parameters=[PricedUsageQuerySerializer],
        responses={(200, "application/json"): PricedUsageSerializer, **DOWNLOADS, **BAD_INPUT, **FORBIDDEN},
        description=gettext_lazy(
            "What closing the month would book now, in the statement's columns: its usage so far (an open month "
            "gives the cost to date) priced with today's rate cards and policy; the caller's teams only, unless "
            "admin or finance. Files are named priced-usage-2026-11.csv."),
    )
    def get(self, request):
        query = PricedUsageQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        period, file_format = query.validated_data["period"], query.validated_data["format"]
        report = priced_usage(period=period, user=request.user)
        label = period_label(period)
        if file_format == "json":
            return Response({"period": label, **_rows_json(report.rows), "unpriced": report.unpriced})
        return self.download(report.rows, file_format=file_format, name=f"priced-usage-{label}",
                             sheet_title=f"Priced usage {label}")


def _refused(refused: CloseRefused) -> Response:
    detail = " ".join(refused.problems)
    return Response({"detail": detail, "problems": refused.problems}, status=status.HTTP_409_CONFLICT)


def _statement_response(statement: Statement, *, code: int) -> Response:
    totals = statement_totals([statement])
    return Response(StatementSerializer(statement, context={"totals": totals}).data, status=code)


class CloseView(APIView):
    permission_classes = [ClosesPeriods]

    @extend_schema(
        request=CloseSerializer,
        responses={
            201: OpenApiResponse(StatementSerializer, description=gettext_lazy("Closed: the new statement.")),
            200: OpenApiResponse(StatementSerializer, description=gettext_lazy(
                "Already closed: its statement, unchanged (closing twice adds nothing).")),
            **BAD_INPUT, **CLOSE_FORBIDDEN, **REFUSED,
        },
        description=gettext_lazy(
            "Close a month: a statement whose ledger entries bring its booked usage to what it is now. Refused "
            "while its data is incomplete or usage has no price."),
    )
    def post(self, request):
        serializer = CloseSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        period, now = serializer.validated_data["period"], timezone.now()
        already = closed_statement_id(period)
        try:
            statement = close_period(period=period, user=request.user, now=now)
        except CloseRefused as refused:
            return _refused(refused)
        # close_period returns the closed statement unchanged when the period was already closed (also when
        # a concurrent close won: then its closed_at is not ours).
        created = statement.pk != already and statement.closed_at == now
        return _statement_response(statement, code=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class ReopenView(APIView):
    permission_classes = [ClosesPeriods]

    @extend_schema(
        request=ReopenSerializer,
        responses={200: OpenApiResponse(StatementSerializer, description=gettext_lazy("The statement, now reopened.")),
                   **BAD_INPUT, **CLOSE_FORBIDDEN, **REFUSED},
        description=gettext_lazy(
            "Reopen a closed month, with a reason; its entries stay, and the next close books reversals and new "
            "entries for what changed. 409 when the month is not closed."),
    )
    def post(self, request):
        serializer = ReopenSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            statement = reopen_period(period=serializer.validated_data["period"], user=request.user,
                                      reason=serializer.validated_data["reason"])
        except CloseRefused as refused:
            return _refused(refused)
        return _statement_response(statement, code=status.HTTP_200_OK)

