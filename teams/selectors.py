"""Reads about teams that other floors scope their rows by."""

from __future__ import annotations

from django.db.models import Value
from django.db.models.functions import Lower

from teams.models import Project, Team
from teams.roles import sees_all_teams


def visible_team_ids(user) -> frozenset[int] | None:
    """The ids of the teams whose rows ``user`` sees in full; None: every team, and rows with no team
    (admin, finance, and the command line, ``user=None``). A signed-out user sees none."""
    if user is None or (user.is_authenticated and sees_all_teams(user)):
        return None
    if not user.is_authenticated:
        return frozenset()
    return frozenset(Team.objects.visible_to(user).values_list("pk", flat=True))


def project_name_taken(team: Team, name: str, *, other_than: int | None = None) -> bool:
    """Whether ``team`` has a project (other than ``other_than``) named ``name`` whatever its case: the
    ``project_unique_name_per_team`` constraint, compared as it compares (``lower``)."""
    others = Project.objects.alias(lowered=Lower("name")).filter(team=team, lowered=Lower(Value(name)))
    if other_than is not None:
        others = others.exclude(pk=other_than)
    return others.exists()
