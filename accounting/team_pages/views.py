"""The team list and a team's page: its card-hours, costs, quotas and people."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.translation import gettext

from accounting.money.idle_ranking import mark_input_bound
from accounting.team_pages import charts as team_charts
from accounting.team_pages import selectors as team_page
from accounting.team_pages.charts import TeamChartText
from teams.models import Team


@login_required
def team_list(request):
    """The teams the user may see: members, projects, efficiency this month and the tightest quota's use."""
    rows = team_page.team_list_rows(request.user, now=timezone.now())
    return render(request, "accounting/team_list.html", {"rows": rows, "teams": [row.team for row in rows]})

def team_chart_text() -> TeamChartText:
    return TeamChartText(
        busy=gettext("Busy"), idle=gettext("Idle"), unmeasured=gettext("Unmeasured"),
        card_hours_axis=gettext("Card-hours"), efficiency_axis=gettext("Efficiency (%)"),
        efficiency=gettext("Efficiency"), today_so_far=gettext("today so far"), remaining=gettext("Remaining"),
        forecast=gettext("Forecast"), expires=gettext("Expires"), empty=gettext("No usage yet"),
    )

def _quota_label(quota) -> str:
    return quota.gpu_model.short_name if quota.gpu_model else gettext("All GPU models")

@login_required
def team_detail(request, slug: str):
    """A team's members and projects, open warnings, this month's card-hours and cost, efficiency trend,
    quota burn-down and its jobs ranked by idle card-hours (issue 8)."""
    # Another team's page is a 404, not a 403: whether a team exists is itself private.
    team = get_object_or_404(Team.objects.visible_to(request.user), slug=slug)
    memberships = team.memberships.select_related("user").order_by("role", "user__username")
    projects = team.projects.order_by("name")
    now = timezone.now()
    window = team_page.month_window(now=now)
    text = team_chart_text()
    by_project = team_page.usage_by_project(team, window=window, user=request.user, now=now)
    by_model = team_page.usage_by_model(team, window=window)
    quotas = []
    statuses = team_page.active_quota_statuses(team, today=window.today, now=now)
    for status in statuses:
        label = _quota_label(status.quota)
        quotas.append({
            "status": status, "label": label, "chart_id": f"chart-burndown-{status.quota.pk}",
            "chart": team_charts.burndown_figure(
                team_page.burndown_frame(status), quota_ticks=status.quota_ticks,
                remaining_ticks=status.remaining_ticks, burn_ticks_per_day=status.forecast.burn_ticks_per_day,
                today=window.today, expires=status.quota.expires,
                title=gettext("Quota burn-down: %(label)s") % {"label": label}, text=text,
            ),
        })
    sees_costs = team_page.sees_team_costs(request.user, team)
    idle_rows, idle_total = team_page.allocations_by_idle(team, window=window, user=request.user)
    mark_input_bound(idle_rows, window.first, window.today)
    return render(request, "accounting/team_detail.html", {
        "team": team,
        "memberships": memberships,
        "projects": projects,
        "window": window,
        "banner": team_page.team_banner(team, statuses),
        "by_project": by_project.to_dict("records"),
        "by_project_totals": team_page.split_totals(by_project),
        "by_model": by_model.to_dict("records"),
        "by_model_totals": team_page.split_totals(by_model),
        "project_chart": team_charts.split_bar_figure(by_project, title=gettext("Card-hours by project"), text=text),
        "model_chart": team_charts.split_bar_figure(by_model, title=gettext("Card-hours by GPU model"), text=text),
        "efficiency_chart": team_charts.efficiency_figure(
            team_page.efficiency_trend(team, today=window.today),
            title=gettext("GPU efficiency, last %(days)d days") % {"days": team_page.TREND_DAYS}, text=text,
        ),
        "quotas": quotas,
        "sees_costs": sees_costs,
        "cost": team_page.month_to_date_cost(team, window=window, user=request.user, now=now) if sees_costs else None,
        "idle": {"rows": idle_rows, "total": idle_total},
        "refined": team_page.beyond_duty_cycle(team, window=window), "shallow_sm_pct": settings.CARDHOUR_SHALLOW_SM_PCT,
        "memory_held_mib": settings.CARDHOUR_MEMORY_HELD_MIB,
    })
