"""The daily board's pages (issue 14): the board at ``/``, its live JSON (today's board refreshes its
tiles, timeline and node health every 60 s through it) and the whole idle ranking. Thin: the selectors
of ``boards/daily.py`` read, ``boards/charts.py`` draws."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import JsonResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.translation import gettext

from accounting.money.statements import sees_costs
from boards.charts import BoardText, bands_figure, group_heatmap_figure, heatmap_figure, timeline_figure
from boards.daily import LIVE_PARTS, DailyBoard, daily_board
from boards.filters import BoardFilterForm
from boards.maths import GPU_ROWS, NODE_ROWS, OTHER_TEAMS
from boards.ranking import TOP, flag_input_bound, idle_ranking
from core.html import json_script
from teams.models import Team

LIVE_REFRESH_S = 60
RANKING_PAGE = 50


def board_text() -> BoardText:
    return BoardText(
        series={"busy": gettext("Busy"), "idle": gettext("Idle"), "unmeasured": gettext("Unmeasured"),
                OTHER_TEAMS: gettext("Other teams"), "unallocated": gettext("Unallocated"), "down": gettext("Down")},
        card_hours_axis=gettext("Card-hours"), share_axis=gettext("Share of allocated measured card-hours (%)"),
        utilization=gettext("Utilization"), partial=gettext("still filling"),
        no_data=gettext("No usage computed for this day yet"), no_holder=gettext("not held"),
        teams_in_band=gettext("By team (share of its own hours)"), gpus=gettext("GPUs"), node_axis=gettext("Node"),
        pool_axis=gettext("Pool"), open_node=gettext("Click to see this node's GPUs"),
        open_pool=gettext("Click to see this pool's nodes"),
    )


def _form(request) -> BoardFilterForm:
    return BoardFilterForm.for_page(request.GET, now=timezone.now())


def _my_teams(user) -> list[Team]:
    if not user.is_authenticated:
        return []
    return list(Team.objects.filter(memberships__user=user).distinct().order_by("name"))


def _links(request, scope) -> dict:
    """Query strings of the day before and after, keeping the filters."""
    params = request.GET.copy()
    params.pop("page", None)
    out = {}
    for name, day in (("previous", scope.day - timedelta(days=1)), ("next", scope.day + timedelta(days=1))):
        params["date"] = day.isoformat()
        out[name] = params.urlencode()
    params.pop("date", None)
    out["filters"] = params.urlencode()
    return out


def _drill(form: BoardFilterForm, board: DailyBoard) -> dict[str, str]:
    """A heatmap row's name → the query string of its own board (``?node=`` for a node, ``?pool=`` for a
    pool), keeping the board's valid day, model and team (not a parameter the page refused)."""
    if board.level == GPU_ROWS or board.hours is None or board.hours.empty:
        return {}
    data = form.cleaned_data
    kept = {"date": board.scope.day.isoformat(), "gpu_model": getattr(data.get("gpu_model"), "short_name", None),
            "team": getattr(data.get("team"), "slug", None), "pool": data.get("pool") or None}
    kept = {key: value for key, value in kept.items() if value}
    key = "node" if board.level == NODE_ROWS else "pool"
    return {name: "?" + urlencode({**kept, key: name}) for name in board.hours["group"].unique().tolist()}


@login_required
def daily(request):
    """The daily board: where the day's card-hours went, for every role (scoped by the selectors)."""
    form = _form(request)
    scope = form.scope()
    board = daily_board(scope, user=request.user, ranking_limit=TOP, movers_limit=TOP)
    flag_input_bound(board.ranking, scope)
    zone = timezone.get_current_timezone()
    text = board_text()
    drill = _drill(form, board)
    figures = {  # as <script type="application/json"> elements, read by static/js/charts.js
        "timeline": json_script(timeline_figure(board.timeline, day_bounds=scope.bounds, zone=zone, text=text),
                                "fig-timeline"),
        "heatmap": json_script(
            heatmap_figure(board.hours, zone=zone, text=text) if board.level == GPU_ROWS else
            group_heatmap_figure(board.hours, level=board.level, drill=drill, zone=zone, text=text), "fig-heatmap"),
        "bands": json_script(bands_figure(board.bands, team_names=board.team_names, text=text), "fig-bands"),
    }
    my_teams = _my_teams(request.user)
    return render(request, "boards/daily.html", {
        "form": form, "scope": scope, "board": board, "figures": figures, "top": board.ranking,
        "more": board.ranking_total - len(board.ranking), "links": _links(request, scope), "my_teams": my_teams,
        "team_filter": form.cleaned_data.get("team"), "live_refresh_s": LIVE_REFRESH_S if scope.live else None,
        "filtered": any(form.cleaned_data.get(k) for k in ("pool", "gpu_model", "node", "team")),
        "sees_costs": board.headline.sees_costs, "settings_long_idle_days": settings.CARDHOUR_LONG_IDLE_DAYS,
        "settings_always_full_pct": settings.CARDHOUR_ALWAYS_FULL_PCT, "shallow_sm_pct": settings.CARDHOUR_SHALLOW_SM_PCT,
        "memory_held_mib": settings.CARDHOUR_MEMORY_HELD_MIB, "drill": drill,
    })


@login_required
def daily_live(request):
    """Today's tiles, timeline and node health in one JSON answer (the page swaps them in place)."""
    form = _form(request)
    if form.shown_errors:
        return JsonResponse({"errors": form.shown_errors.get_json_data()}, status=400)
    scope = form.scope()
    board = daily_board(scope, user=request.user, parts=LIVE_PARTS)
    zone = timezone.get_current_timezone()
    context = {"board": board, "scope": scope, "head": board.headline}
    return JsonResponse({
        "computed_to": board.computed_to.isoformat(),
        "tiles_html": render_to_string("boards/_tiles.html", context, request=request),
        "health_html": render_to_string("boards/_health.html", context, request=request),
        "timeline": timeline_figure(board.timeline, day_bounds=scope.bounds, zone=zone, text=board_text()),
    })


@login_required
def idle_allocations(request):
    """Every allocation of the day ranked by idle card-hours, 50 a page."""
    form = _form(request)
    scope = form.scope()
    ranking = idle_ranking(scope, user=request.user)
    page = Paginator(ranking, RANKING_PAGE).get_page(request.GET.get("page"))
    flag_input_bound(page.object_list, scope)
    return render(request, "boards/idle_allocations.html", {
        "form": form, "scope": scope, "page": page, "rows": page.object_list, "start_rank": page.start_index(),
        "links": _links(request, scope), "sees_costs": sees_costs(request.user),
        "shallow_sm_pct": settings.CARDHOUR_SHALLOW_SM_PCT,
    })
