from dataclasses import dataclass

from django.urls import reverse
from django.utils.translation import gettext_lazy as _

from teams.roles import TeamRole, is_admin, role_labels, sees_all_teams


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
    memberships = list(user.memberships.select_related("team").order_by("team__name"))
    if sees_all_teams(user) or any(membership.role == TeamRole.LEAD for membership in memberships):
        # The threshold backtest (issue 19): admins, finance and leads (boards/backtest/forms.py may_backtest).
        entries.append(NavEntry(_("Backtest"), reverse("boards:backtest"), "backtest"))
    if sees_all_teams(user):
        entries.append(NavEntry(_("Finance"), reverse("accounting:finance"), "finance"))
    if is_admin(user):
        entries.append(NavEntry(_("Admin site"), reverse("admin:index"), "admin"))
    return {"nav_entries": entries, "nav_roles": role_labels(user, memberships),
            "nav_current": current_entry(request.path, entries)}


def current_entry(path: str, entries: list[NavEntry]) -> str | None:
    """The key of the entry whose page ``path`` is: the longest entry URL that ``path`` starts with (the
    board's week and month views, under /board/, are the board's; the home page only for itself)."""
    best = None
    for entry in entries:
        if (path == entry.url or (entry.url != "/" and path.startswith(entry.url))) and (
                best is None or len(entry.url) > len(best.url)):
            best = entry
    if best is None and path.startswith("/board/"):
        return "board"
    return best.key if best else None
