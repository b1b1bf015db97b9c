"""A team's plan against actual (issue 19): ``/teams/<slug>/plan/?period=YYYY-MM``, from the one read
:func:`accounting.plans.selectors.team_plan` its API shows too."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.translation import gettext

from accounting.money.statements import period_label
from accounting.plans import charts as plan_charts
from accounting.plans import rules
from accounting.plans.forms import PlanPeriodForm
from accounting.plans.selectors import default_period, team_plan
from core.timeutils import month_days, previous_month
from teams.models import Team


def plan_chart_text() -> plan_charts.PlanChartText:
    return plan_charts.PlanChartText(
        planned=gettext("Planned"), actual=gettext("Actual"), card_hours_axis=gettext("Card-hours"),
        week_axis=gettext("Week from"), so_far=gettext("so far"),
        empty=gettext("Nothing planned or used this month"),
    )


def deviation_labels() -> dict[str, str]:
    return {rules.OVER: gettext("over"), rules.UNDER: gettext("under"), rules.ON_PLAN: gettext("on plan"),
            rules.NO_ESTIMATE: gettext("no estimate")}


@login_required
def team_plan_page(request, slug: str):
    """The team's queued and running jobs by priority, its finished jobs of the month, planned against actual
    card-hours per week and the jobs that waited for data; deviations beyond the setting highlighted."""
    # Another team's plan is a 404, as its page is: whether a team exists is itself private.
    team = get_object_or_404(Team.objects.visible_to(request.user), slug=slug)
    now = timezone.now()
    form = PlanPeriodForm(request.GET, now=now)
    valid = form.is_valid()
    period = form.period_or_default() if valid else default_period(now=now)  # the error shows above this month
    plan = team_plan(team, period=period, now=now)
    following = month_days(plan.first)[1]
    label = period_label(plan.first)
    return render(request, "accounting/team_plan.html", {
        "team": team,
        "plan": plan,
        "period": label,
        "period_form": form if not valid else PlanPeriodForm(initial={"period": label}, now=now),
        "previous_period": period_label(previous_month(plan.first)),
        "next_period": period_label(following),
        "labels": deviation_labels(),
        "week_chart": plan_charts.plan_figure(
            plan_charts.weeks_frame(plan.weeks),
            title=gettext("Planned and actual card-hours per week, %(period)s") % {"period": label},
            text=plan_chart_text(),
        ),
    }, status=200 if valid else 400)
