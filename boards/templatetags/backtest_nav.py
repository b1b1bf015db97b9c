"""``{% backtest_nav as shown %}``: whether the main navigation lists the threshold backtest (issue 19), for the
people who may open it (boards/backtest/forms.py: admins, finance, leads), without a query of its own (the
navigation is on every page, and pages pin their query counts): admin and finance from the groups the
navigation already read (cached on the user), a lead from the role labels it put in ``nav_roles``
(teams/roles.py ``role_labels``: "<role> · <team>", the role in the reader's language)."""

from django import template

from teams.roles import TeamRole, sees_all_teams

register = template.Library()


@register.simple_tag(takes_context=True)
def backtest_nav(context) -> bool:
    user = context.get("user")
    if user is None or not user.is_authenticated:
        return False
    if sees_all_teams(user):
        return True
    lead = f"{TeamRole.LEAD.label} · "
    return any(str(label).startswith(lead) for label in context.get("nav_roles") or ())
