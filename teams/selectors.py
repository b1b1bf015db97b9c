"""Reads about teams that other floors scope their rows by."""

from __future__ import annotations

from teams.models import Team
from teams.roles import sees_all_teams


def visible_team_ids(user) -> frozenset[int] | None:
    """The ids of the teams whose rows ``user`` sees in full; None: every team, and rows with no team
    (admin, finance, and the command line, ``user=None``). A signed-out user sees none."""
    if user is None or (user.is_authenticated and sees_all_teams(user)):
        return None
    if not user.is_authenticated:
        return frozenset()
    return frozenset(Team.objects.visible_to(user).values_list("pk", flat=True))
