from django import forms
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.db.models import Count
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from accounting import team_charts, team_page
from accounting.models import ApiToken, Team
from accounting.team_charts import TeamChartText


class LoginForm(AuthenticationForm):
    # One message for a wrong username and a wrong password alike: never tell which half was wrong.
    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": _("Wrong username or password."),
    }


class LoginView(auth_views.LoginView):
    form_class = LoginForm
    template_name = "accounting/login.html"
    redirect_authenticated_user = True


class LogoutView(auth_views.LogoutView):
    pass


@login_required
def team_list(request):
    teams = (
        Team.objects.visible_to(request.user)
        .annotate(member_count=Count("memberships", distinct=True), project_count=Count("projects", distinct=True))
        .order_by("name")
    )
    return render(request, "accounting/team_list.html", {"teams": teams})


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
    for status in team_page.active_quota_statuses(team, today=window.today):
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
    return render(request, "accounting/team_detail.html", {
        "team": team,
        "memberships": memberships,
        "projects": projects,
        "window": window,
        "alerts": team_page.team_alerts(team),
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
        "idle_jobs": team_page.jobs_by_idle(team, window=window, now=now),
        "jobs_considered": team_page.JOBS_CONSIDERED,
    })


class TokenForm(forms.Form):
    name = forms.CharField(label=_("Name"), max_length=100, help_text=_("What the token is for, e.g. 'laptop CLI'."))
    expires_at = forms.DateTimeField(label=_("Expires"), required=False, help_text=_("Optional, e.g. 2027-01-31 18:00."))

    def clean_expires_at(self):
        value = self.cleaned_data["expires_at"]
        if value is not None and value <= timezone.now():
            raise forms.ValidationError(_("An expiry must be in the future."))
        return value


@login_required
def token_list(request):
    """A person's API tokens: create (the token is shown once) and revoke."""
    new_token = None
    form = TokenForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        _token, new_token = ApiToken.issue(
            user=request.user, name=form.cleaned_data["name"], expires_at=form.cleaned_data["expires_at"]
        )
        form = TokenForm()
    tokens = ApiToken.objects.filter(user=request.user).order_by("-created_at")
    return render(request, "accounting/token_list.html", {"form": form, "tokens": tokens, "new_token": new_token})


@login_required
@require_POST
def token_revoke(request, pk: int):
    token = get_object_or_404(ApiToken.objects.filter(user=request.user), pk=pk)
    token.revoke()
    messages.success(request, _("Token “%(name)s” revoked.") % {"name": token.name})
    return redirect("accounting:token-list")
