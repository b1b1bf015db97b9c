"""The threshold backtest's page (``/boards/backtest/``) and its CSV (``/boards/backtest.csv``) with the same
parameters (issue 19). Thin: ``forms.py`` validates and decides who may see what, ``report.py`` replays,
``charts.py`` draws. Opened with no parameters, the page shows the preset (``forms.preset_data``)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import render
from django.utils import timezone
from django.utils.translation import gettext

from accounting.money.exports import download_response
from boards.backtest.charts import BacktestText, figures_figure, held_figure
from boards.backtest.forms import PRESET_RULES, BacktestForm, preset_data
from boards.backtest.report import CSV_COLUMNS, Backtest, csv_rows, run_backtest
from boards.backtest.selectors import may_backtest
from core.html import json_script


def chart_text() -> BacktestText:
    return BacktestText(gpus_axis=gettext("GPUs"), actual=gettext("Actually held"),
                        demand=gettext("Demand (in use + queued)"), no_data=gettext("No recorded minutes in this period"),
                        saved=gettext("Card-hours saved"), under=gettext("Hours under-provisioned"),
                        events=gettext("Scale events"), longest_cut=gettext("Longest cut (minutes)"))


def _form(request) -> tuple[BacktestForm, bool]:
    if not may_backtest(request.user):
        raise PermissionDenied
    now = timezone.now()
    data = request.GET
    preset = not any(key for key in data if key != "format")
    if preset:
        data = preset_data(request.user, now=now)
    return BacktestForm(data, user=request.user, now=now), preset


def _refused(request, form: BacktestForm, *, preset: bool):
    status = 404 if form.scope_missing else 400
    return render(request, "boards/backtest.html", {"form": form, "errors": form.error_list(), "preset": preset,
                                                     "presets": PRESET_RULES}, status=status)


def _label(form: BacktestForm) -> str:
    data = form.cleaned_data
    scope = data["pool"] or data["team"].slug
    return f"backtest-{scope}-{data['gpu_model'].short_name}-{data['start']:%Y%m%d}-{data['end']:%Y%m%d}"


def _charts(report: Backtest) -> dict:
    text = chart_text()
    minutes = report.recorded
    held = held_figure(start=minutes.start, end=report.scope.end, actual=minutes.held, demand=minutes.demand,
                       rules=[(f.name, f.outcome.gpus) for f in report.rules], zone=timezone.get_current_timezone(),
                       text=text)
    bars = figures_figure([(f.name, f.saved_card_hours, f.under_hours, f.outcome.scale_events,
                            f.outcome.longest_cut_minutes) for f in report.rules], text=text)
    return {"held_figure": json_script(held, "fig-backtest-held"), "bars_figure": json_script(bars, "fig-backtest-bars")}


@login_required
def backtest(request):
    """Replay one to four rule sets over a scope's recorded minutes, side by side."""
    form, preset = _form(request)
    if not form.is_valid():
        return _refused(request, form, preset=preset)
    report = run_backtest(form.scope(), form.rules(), now=form.now)
    csv_query = form.data.urlencode() if hasattr(form.data, "urlencode") else urlencode(form.data)
    return render(request, "boards/backtest.html", {
        "form": form, "preset": preset, "presets": PRESET_RULES, "report": report, "csv_query": csv_query,
        "columns": report.columns, **_charts(report),
    })


@login_required
def backtest_csv(request):
    """The side-by-side figures as CSV: one row for what was actually held, one per rule set."""
    form, preset = _form(request)
    if not form.is_valid():
        return _refused(request, form, preset=preset)
    report = run_backtest(form.scope(), form.rules(), now=form.now)
    return download_response(CSV_COLUMNS, csv_rows(report), file_format="csv", filename=f"{_label(form)}.csv",
                             sheet_title="backtest")
