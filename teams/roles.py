"""Who may see what (DESIGN.md §2). Admin and finance are global Django groups; lead and engineer are
per-team memberships. Querysets call these; templates only show what views computed from them."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

ADMIN_GROUP = "admin"
FINANCE_GROUP = "finance"


class TeamRole(models.TextChoices):
    LEAD = "lead", _("Lead")
    ENGINEER = "engineer", _("Engineer")


def _group_names(user) -> frozenset[str]:
    # Cached on the user object: a request asks several times.
    cached = getattr(user, "_cardhour_groups", None)
    if cached is None:
        cached = frozenset(user.groups.values_list("name", flat=True)) if user.is_authenticated else frozenset()
        user._cardhour_groups = cached
    return cached


def is_admin(user) -> bool:
    return bool(user.is_authenticated and (user.is_superuser or ADMIN_GROUP in _group_names(user)))


def is_finance(user) -> bool:
    return bool(user.is_authenticated and FINANCE_GROUP in _group_names(user))


def sees_all_teams(user) -> bool:
    """Admin and finance see every team's usage and costs; everyone else only their own teams'."""
    return is_admin(user) or is_finance(user)


def sees_all_teams_q() -> models.Q:
    """:func:`sees_all_teams` as a condition on users (admin: superusers and the admin group; finance)."""
    return models.Q(is_superuser=True) | models.Q(groups__name__in=(ADMIN_GROUP, FINANCE_GROUP))


def role_labels(user, memberships=None) -> list[str]:
    """Short labels for the page header, e.g. ['admin'] or ['lead · ml-platform']; ``memberships`` (the
    user's, with their teams) when the caller has read them already."""
    labels = []
    if is_admin(user):
        labels.append(str(_("admin")))
    if is_finance(user):
        labels.append(str(_("finance")))
    if user.is_authenticated:
        if memberships is None:
            memberships = user.memberships.select_related("team").order_by("team__name")
        for membership in memberships:
            labels.append(f"{membership.get_role_display()} · {membership.team.name}")
    return labels
