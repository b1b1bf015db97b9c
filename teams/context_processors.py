from dataclasses import dataclass

from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from teams.roles import is_admin, role_labels, sees_all_teams


@dataclass(frozen=True)
class NavEntry:
    label: str
    url: str
    key: str


def navigation(request):
    """Navigation entries the signed-in person's roles allow; only pages that exist are listed."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"nav_entries": [], "nav_roles": []}
    entries = [
        NavEntry(_("Board"), reverse("boards:daily"), "board"),
        NavEntry(_("Monthly profile"), reverse("boards:profile"), "profile"),
        NavEntry(_("Inventory"), reverse("cluster:inventory"), "inventory"),
        NavEntry(_("Jobs"), reverse("cluster:job-list"), "jobs"),
        NavEntry(_("Bookings"), reverse("cluster:booking-calendar"), "bookings"),
        NavEntry(_("Teams"), reverse("accounting:team-list"), "teams"),
        NavEntry(_("API tokens"), reverse("teams:token-list"), "tokens"),
    ]
    if sees_all_teams(user):
        entries.append(NavEntry(_("Finance"), reverse("accounting:finance"), "finance"))
    if is_admin(user):
        entries.append(NavEntry(_("Admin site"), reverse("admin:index"), "admin"))
    return {"nav_entries": entries, "nav_roles": role_labels(user)}
