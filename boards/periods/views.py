"""The resource profile page (issue 15): ``/board/profile/?month=YYYY-MM`` for every role (card-hours and team
names are cluster-wide figures; the page shows no money), and its tables as CSV
(``?format=csv&table=models|teams|need``). Thin: ``boards/periods/profile.py`` reads, ``charts.py`` draws.

The week and month views of the daily board (``/board/week/?week=YYYY-MM-DD``, ``/board/month/?month=YYYY-MM``)
with the daily board's filters, and their team and model tables as CSV (``?format=csv&table=teams|models``):
``boards/periods/summary.py`` reads."""

from __future__ import annotations

from dataclasses import replace
from datetime import date, datetime, timedelta

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.utils.translation import gettext, gettext_lazy

from accounting.money.exports import download_response
from accounting.money.statements import period_label
from boards.filters import BoardFilterForm
from boards.periods.charts import ProfileText, days_figure, held_figure, sparkline_svg
from boards.periods.profile import MonthProfile, Need, ProfileRow, month_profile, next_month_need
from boards.periods.summary import (
    MONTH,
    WEEK,
    PeriodSummary,
    TableRow,
    last_full_week,
    month_span,
    period_summary,
)
from boards.views import board_text
from core.html import json_script
from core.timeutils import business_today, month_days, previous_month, week_days
from core.timewindow import WINDOW_START

MONTH_RULE = gettext_lazy(
    "The “month” parameter must be a month written YYYY-MM, from 2000-01 to the current month.")
TABLE_RULE = gettext_lazy("The “table” parameter must be models, teams or need.")
FORMAT_RULE = gettext_lazy("The “format” parameter must be csv.")
TABLES = ("models", "teams", "need")
FILTER_FIELDS = ("pool", "gpu_model", "node", "team")
ROW_COLUMNS = ["peak_gpus_held", "mean_gpus_held", "card_hours_allocated", "card_hours_busy", "card_hours_idle",
               "card_hours_unmeasured", "efficiency_pct"]
NEED_COLUMNS = ["kind", "name", "months_used", "method", "projected_gpus", "low_gpus", "high_gpus", "band_gpus",
                "last_month_mean_gpus", "capacity_gpus", "headroom_gpus"]


class BadParameter(ValueError):
    """A query parameter that breaks its rule: ``field`` names it, the message says the rule."""

    def __init__(self, field: str, rule):
        super().__init__(str(rule))
        self.field, self.rule = field, rule


def requested_month(text: str | None, *, now: datetime) -> date:
    """The first day of ``?month`` (default: the current business month); :class:`BadParameter` when it is not
    YYYY-MM in [2000-01, the current month]."""
    current = month_days(business_today(now=now))[0]
    if not text:
        return current
    try:
        year, month = text.split("-")
        if len(year) != 4 or len(month) != 2:
            raise ValueError(text)
        first = date(int(year), int(month), 1)
    except ValueError:
        raise BadParameter("month", MONTH_RULE) from None
    if not WINDOW_START.date() <= first <= current:
        raise BadParameter("month", MONTH_RULE)
    return first


def requested_csv(request, tables: tuple[str, ...], table_rule) -> tuple[str | None, str | None]:
    """(``?format``, ``?table``): no format, or ``csv`` with one of ``tables``; :class:`BadParameter` otherwise."""
    file_format, table = request.GET.get("format"), request.GET.get("table")
    if file_format not in (None, "", "csv"):
        raise BadParameter("format", FORMAT_RULE)
    if file_format == "csv" and table not in tables:
        raise BadParameter("table", table_rule)
    return file_format, table


def profile_text() -> ProfileText:
    return ProfileText(held_axis=gettext("GPUs held (concurrent)"), total=gettext("Cluster"),
                       capacity=gettext("Capacity (GPUs in service)"), partial=gettext("hour still running"),
                       no_data=gettext("No hourly usage in this month"))


def _row_dict(row: ProfileRow, name_column: str, name: str) -> dict:
    return {name_column: name, "peak_gpus_held": row.peak, "mean_gpus_held": row.mean,
            "mean_gpus_in_service": row.capacity, "card_hours_allocated": row.allocated,
            "card_hours_busy": row.busy, "card_hours_idle": row.idle, "card_hours_unmeasured": row.unmeasured,
            "efficiency_pct": row.efficiency}


def _need_dicts(need: Need) -> list[dict]:
    rows = []
    for kind, items in (("team", need.teams), ("model", need.models), ("cluster", [need.total])):
        for item in items:
            p = item.projection
            rows.append({"kind": kind, "name": item.name or (gettext("Cluster") if kind == "cluster" else ""),
                         "months_used": p.months_used, "method": p.method, "projected_gpus": p.value,
                         "low_gpus": p.low, "high_gpus": p.high, "band_gpus": p.band,
                         "last_month_mean_gpus": p.last_mean, "capacity_gpus": item.capacity,
                         "headroom_gpus": item.headroom})
    return rows


def _download(table: str, profile: MonthProfile, need: Need):
    label = period_label(profile.month)
    if table == "models":
        columns = ["gpu_model", "mean_gpus_in_service", *ROW_COLUMNS]
        rows = [_row_dict(r, "gpu_model", r.name or gettext("Unknown model")) for r in profile.models]
        total = _row_dict(profile.total, "gpu_model", gettext("Total"))
    elif table == "teams":
        columns = ["team", *ROW_COLUMNS]
        rows, total = [_row_dict(r, "team", r.name) for r in profile.teams], None
    else:
        columns, rows, total, label = NEED_COLUMNS, _need_dicts(need), None, period_label(need.month)
    return download_response(columns, rows, file_format="csv", filename=f"profile-{table}-{label}.csv",
                             sheet_title=table, total=total)


def _links(month: date, *, now: datetime) -> dict:
    following = month_days(month)[1]
    current = month_days(business_today(now=now))[0]
    return {"previous": period_label(previous_month(month)) if previous_month(month) >= WINDOW_START.date() else None,
            "next": period_label(following) if following <= current else None, "current": period_label(month)}


@login_required
def profile(request):
    """A month's resource profile and next month's need."""
    now = timezone.now()
    try:
        month = requested_month(request.GET.get("month"), now=now)
        file_format, table = requested_csv(request, TABLES, TABLE_RULE)
    except BadParameter as error:
        return render(request, "boards/profile.html", {"error": error, "links": None,
                                                       "max_month": period_label(month_days(business_today(now=now))[0])},
                      status=400)
    month_view = month_profile(month, now=now)
    need = next_month_need(now=now)
    if file_format == "csv":
        return _download(table, month_view, need)
    figure = held_figure(month_view.series, bounds=(month_view.start, month_view.end),
                         zone=timezone.get_current_timezone(), text=profile_text())
    return render(request, "boards/profile.html", {
        "profile": month_view, "need": need, "figure": json_script(figure, "fig-profile"),
        "links": _links(month, now=now), "month_input": period_label(month),
        "max_month": period_label(month_days(business_today(now=now))[0]),
        "need_groups": [(gettext("Cluster"), [need.total]), (gettext("GPU models"), need.models),
                        (gettext("Teams"), need.teams)],
    })


# ---- week and month views of the daily board ---------------------------------------------------------------

WEEK_RULE = gettext_lazy(
    "The “week” parameter must be a day of the week written YYYY-MM-DD, from 2000-01-01 to today.")
PERIOD_TABLE_RULE = gettext_lazy("The “table” parameter must be teams or models.")
PERIOD_TABLES = ("teams", "models")
PERIOD_COLUMNS = ["card_hours_allocated", "card_hours_busy", "card_hours_idle", "card_hours_unmeasured",
                  "efficiency_pct"]
COST_COLUMNS = ["idle_cost", "usage_cost"]


def requested_week(text: str | None, *, now: datetime) -> date:
    """The Monday of ``?week``'s week (any day of it; default: the last full week); :class:`BadParameter`
    when it is not YYYY-MM-DD in [2000-01-01, today]."""
    today = business_today(now=now)
    if not text:
        return last_full_week(today)
    try:
        day = date.fromisoformat(text)
        if len(text) != 10:
            raise ValueError(text)
    except ValueError:
        raise BadParameter("week", WEEK_RULE) from None
    if not WINDOW_START.date() <= day <= today:
        raise BadParameter("week", WEEK_RULE)
    return week_days(day)[0]


def _period_params(request, kind: str, *, now: datetime) -> tuple[date, date]:
    if kind == WEEK:
        return week_days(requested_week(request.GET.get(kind), now=now))
    return month_span(requested_month(request.GET.get(kind), now=now))


def _period_links(request, kind: str, first: date, *, now: datetime) -> dict:
    """Query strings of the period before and after (None: outside the window or not begun), keeping the filters."""
    params = request.GET.copy()
    for key in ("format", "table"):
        params.pop(key, None)
    today = business_today(now=now)
    if kind == WEEK:
        before, after = first - timedelta(days=7), first + timedelta(days=7)
        value = date.isoformat
    else:
        before, after = previous_month(first), month_days(first)[1]
        value = period_label
    out = {}
    for name, start in (("previous", before), ("next", after)):
        if (kind == WEEK and start + timedelta(days=6) < WINDOW_START.date()) or start > today:
            out[name] = None
            continue
        params[kind] = value(start)
        out[name] = params.urlencode()
    params[kind] = value(first)
    out["current"] = params.urlencode()
    return out


def _period_row_dict(row: TableRow, name_column: str, name: str, *, costs: bool) -> dict:
    out = {name_column: name, "card_hours_allocated": row.allocated, "card_hours_busy": row.busy,
           "card_hours_idle": row.idle, "card_hours_unmeasured": row.unmeasured, "efficiency_pct": row.efficiency}
    if costs:
        out |= {"idle_cost": row.idle_cost, "usage_cost": row.cost}
    return out


def _period_download(table: str, summary: PeriodSummary, label: str):
    head = summary.headline
    if table == "teams":
        name_column, rows, total = "team", summary.teams, summary.team_total
        costs, unnamed = head.sees_costs, gettext("No team")
    else:
        name_column, rows, total = "gpu_model", summary.models, summary.model_total
        costs, unnamed = head.sees_all_costs, gettext("Unknown model")
    columns = [name_column, *PERIOD_COLUMNS, *(COST_COLUMNS if costs else [])]
    return download_response(
        columns, [_period_row_dict(r, name_column, r.name or unnamed, costs=costs) for r in rows],
        file_format="csv", filename=f"{summary.kind}-{table}-{label}.csv", sheet_title=table,
        total=_period_row_dict(total, name_column, gettext("Total"), costs=costs))


def _period(request, kind: str):
    now = timezone.now()
    form = BoardFilterForm({k: v for k, v in request.GET.items() if k in FILTER_FIELDS}, now=now)
    try:
        first, last = _period_params(request, kind, now=now)
        file_format, table = requested_csv(request, PERIOD_TABLES, PERIOD_TABLE_RULE)
        if not form.is_valid():
            field, errors = next(iter(form.errors.items()))
            raise BadParameter(field, errors[0])
    except BadParameter as error:
        return render(request, "boards/period.html", {"kind": kind, "error": error, "links": None}, status=400)
    scope = replace(form.scope(), day=first, last=last)
    summary = period_summary(scope, user=request.user, kind=kind, total_name=gettext("Total"))
    label = first.isoformat() if kind == WEEK else period_label(first)
    if file_format == "csv":
        return _period_download(table, summary, label)
    text = replace(board_text(), no_data=gettext("No usage computed for this period yet"))
    figure = days_figure(summary.bars, text=text, day_axis=gettext("Business day"))
    spark_title = gettext("Allocated card-hours per day")
    return render(request, "boards/period.html", {
        "kind": kind, "summary": summary, "scope": scope, "head": summary.headline, "form": form,
        "figure": json_script(figure, "fig-days"), "links": _period_links(request, kind, first, now=now),
        "label": label, "teams": [(row, mark_safe(sparkline_svg(row.daily, title=spark_title)))  # noqa: S308
                                  for row in summary.teams],
        "filtered": any(form.cleaned_data.get(k) for k in FILTER_FIELDS),
        "long_idle_days": settings.CARDHOUR_LONG_IDLE_DAYS,
        "max_week": business_today(now=now).isoformat(),
        "max_month": period_label(month_days(business_today(now=now))[0]),
    })


@login_required
def week(request):
    """A business week (Monday–Sunday) of the daily board, against the week before."""
    return _period(request, WEEK)


@login_required
def month(request):
    """A business month of the daily board, against the month before."""
    return _period(request, MONTH)
