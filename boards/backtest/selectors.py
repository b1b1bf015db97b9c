"""Who may backtest what (issue 19): admins and finance every pool and team, leads the teams they lead. The page,
its CSV and the command ask these; a scope outside them is answered as one that does not exist."""

from __future__ import annotations

from teams.models import Membership, Team
from teams.roles import TeamRole, sees_all_teams


def may_backtest(user) -> bool:
    """Admins, finance and the leads of a team (the page's and the command's gate)."""
    return user.is_authenticated and (
        sees_all_teams(user) or Membership.objects.filter(user=user, role=TeamRole.LEAD).exists())


def sees_every_scope(user) -> bool:
    """Admins and finance, or the command (``user`` None: an operator at the server)."""
    return user is None or sees_all_teams(user)


def backtest_teams(user):
    """The teams ``user`` may backtest (every team for admins and finance; the teams they lead otherwise)."""
    teams = Team.objects.only("id", "name", "slug").order_by("name")
    if sees_every_scope(user):
        return teams
    return teams.filter(memberships__user=user, memberships__role=TeamRole.LEAD).distinct()
