"""The weekly report e-mail (issue 15): every Monday after the digest time (``NOTIFY_DIGEST_LOCAL_TIME``, display
zone ``TIME_ZONE``), last week's figures (Monday–Sunday business days) to each team lead, per team they lead
(efficiency, idle card-hours and cost, the top idle allocations, the quotas and their run-out), and to admin and
finance (the week's tiles and team table), with links back to the week view.

**One source.** The figures are the week view's: :func:`boards.periods.summary.period_summary` over the week's
:class:`~boards.scope.BoardScope`, read as the recipient (so a lead's costs are their teams' only).

**Once a week.** Each person's mark (:class:`accounting.models.WeeklyReportSent`, unique per user and week) is
written first in the transaction that sends: a second run, or one running at the same time, finds it and sends
nothing; a failed send rolls the mark back and is tried again on the next run. A week missed on Monday (the
worker was down) is sent any later time that week; the next Monday's digest time moves on to the next week.
Before Monday's digest time nothing is sent."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMultiAlternatives
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext as _

from accounting.models import WeeklyReportOptOut, WeeklyReportSent
from accounting.money.idle_ranking import IdleRow, rank_idle
from accounting.notify.services import digest_time
from accounting.quotas.selectors import QuotaStatus
from accounting.team_pages.selectors import active_quota_statuses
from boards.periods.summary import WEEK, PeriodSummary, period_summary
from boards.scope import BoardScope
from core.timeutils import business_today, week_days
from teams.models import Membership, Team
from teams.roles import TeamRole, sees_all_teams, sees_all_teams_q

log = logging.getLogger(__name__)
TOP_IDLE = 5


@dataclass(frozen=True)
class LeadTeam:
    """One team a recipient leads, over the week: its efficiency (%; None: nothing allocated), idle card-hours
    and idle cost (None: no figure), its most idle allocations and its quotas in force on the week's last day."""

    team: Team
    url: str
    efficiency: Decimal | None
    idle_card_hours: Decimal
    idle_cost: Decimal | None
    top_idle: list[IdleRow]
    idle_allocations: int  # how many allocations the ranking holds in all
    quotas: list[QuotaStatus]


@dataclass(frozen=True)
class WeeklyReport:
    """What one person's weekly report shows: ``teams`` they lead, ``cluster`` (admin, finance) the week view's
    summary as they see it (tiles and team table); ``summary`` the week view's summary read as them."""

    user: object
    monday: date
    sunday: date
    week_url: str
    currency: str
    summary: PeriodSummary
    teams: list[LeadTeam]
    cluster: PeriodSummary | None


def week_url(monday: date) -> str:
    return f"{settings.CARDHOUR_SITE_URL}{reverse('boards:week')}?week={monday.isoformat()}"


def _lead_team(team: Team, summary: PeriodSummary, *, user, now: datetime) -> LeadTeam:
    monday, sunday = summary.scope.span
    row = next((r for r in summary.headline.teams if r.team_id == team.pk), None)
    top, count = rank_idle(monday, sunday, user=user, team_id=team.pk, limit=TOP_IDLE)
    return LeadTeam(
        team=team, url=f"{settings.CARDHOUR_SITE_URL}{reverse('accounting:team-detail', args=[team.slug])}",
        efficiency=row.efficiency if row else None, idle_card_hours=row.idle if row else Decimal("0.0000"),
        idle_cost=row.idle_cost if row else None, top_idle=top, idle_allocations=count,
        quotas=active_quota_statuses(team, today=sunday, now=now),  # as the team page reads them
    )


def weekly_report_for(user, monday: date, now: datetime) -> WeeklyReport | None:
    """``user``'s report of the week starting ``monday`` as of ``now``; None when they get none (not a lead, admin
    or finance)."""
    led = list(Team.objects.led_by(user).order_by("name"))
    everything = sees_all_teams(user)
    if not led and not everything:
        return None
    sunday = week_days(monday)[1]
    scope = BoardScope(day=monday, last=sunday, now=now)
    summary = period_summary(scope, user=user, kind=WEEK, total_name=_("Total"))
    return WeeklyReport(
        user=user, monday=monday, sunday=sunday, week_url=week_url(monday), currency=summary.headline.currency,
        summary=summary, teams=[_lead_team(team, summary, user=user, now=now) for team in led],
        cluster=summary if everything else None,
    )


def report_week(now: datetime) -> date | None:
    """The Monday of the week whose report is due at ``now``: last week, from Monday's digest time (display zone)
    to the next Monday's, once that week is over in the business zone too; None before Monday's digest time."""
    local = timezone.localtime(now, ZoneInfo(settings.TIME_ZONE))
    if local.weekday() == 0 and local.time() < digest_time():
        return None
    monday = week_days(local.date())[0] - timedelta(days=7)
    if business_today(now=now) <= week_days(monday)[1]:
        return None  # the display zone is ahead of the business zone: last week's Sunday still runs there
    return monday


def recipients(monday: date):
    """Active people with an e-mail who lead a team or are admin or finance, not opted out, not yet sent ``monday``'s
    report."""
    leads = Membership.objects.filter(role=TeamRole.LEAD).values("user_id")
    return (
        get_user_model().objects.filter(is_active=True)
        .filter(Q(pk__in=leads) | sees_all_teams_q())
        .exclude(email="")
        .exclude(pk__in=WeeklyReportOptOut.objects.values("user_id"))
        .exclude(pk__in=WeeklyReportSent.objects.filter(week_start=monday).values("user_id"))
        .distinct().order_by("pk")
    )


def send_weekly_reports(*, now: datetime) -> int:
    """E-mail last week's report to each recipient who has not had it, once (see the module's docstring).
    Returns reports sent."""
    monday = report_week(now)
    if monday is None:
        return 0
    return sum(_send_report(user=user, monday=monday, now=now) for user in recipients(monday))


def render_report(report: WeeklyReport) -> EmailMultiAlternatives:
    """The report as an e-mail with a plain-text part and an HTML part, in the site's language."""
    with translation.override(settings.LANGUAGE_CODE):
        context = {"report": report, "head": report.summary.headline}
        subject = _("[Cardhour] Weekly report %(first)s – %(last)s") % {
            "first": report.monday.isoformat(), "last": report.sunday.isoformat()}
        text = render_to_string("boards/weekly_report.txt", context)
        html = render_to_string("boards/weekly_report.html", context)
    message = EmailMultiAlternatives(subject, text, None, [report.user.email])
    message.attach_alternative(html, "text/html")
    return message


def _send_report(*, user, monday: date, now: datetime) -> int:
    try:
        with transaction.atomic():
            # The week's mark is written first: a second run (or one at the same time) finds it and sends nothing.
            WeeklyReportSent.objects.create(user=user, week_start=monday, sent_at=now)
            report = weekly_report_for(user, monday, now)
            if report is None:
                raise _Nothing
            render_report(report).send()
    except (IntegrityError, _Nothing):
        return 0
    except Exception:
        log.exception("the weekly report for user %s failed; it is tried again on the next run", user.pk)
        return 0
    return 1


class _Nothing(Exception):
    pass
