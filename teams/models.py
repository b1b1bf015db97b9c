"""Teams, their projects and people (DESIGN.md §2). The tables kept their names from when they lived in the
accounting app (docs/decisions.md, "Layout")."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models.functions import Lower
from django.utils.translation import gettext_lazy as _

from teams.audit.models import AuditEntry, AuditKind
from teams.roles import TeamRole, sees_all_teams
from teams.tokens import ApiToken, ApiTokenKind, TokenFailures

__all__ = ["ApiToken", "ApiTokenKind", "AuditEntry", "AuditKind", "Membership", "Project", "Team", "TokenFailures"]

cost_centre_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,31}$",
    _("A cost-centre code is 1 to 32 letters, digits, '.', '_', '/' or '-', starting with a letter or digit."),
)


class TeamQuerySet(models.QuerySet):
    def visible_to(self, user) -> TeamQuerySet:
        """The teams whose rows ``user`` may see: all for admin and finance, else their memberships."""
        if not user.is_authenticated:
            return self.none()
        if sees_all_teams(user):
            return self
        return self.filter(memberships__user=user).distinct()

    def led_by(self, user) -> TeamQuerySet:
        return self.filter(memberships__user=user, memberships__role=TeamRole.LEAD).distinct()


class Team(models.Model):
    """A group of people who share a quota and are billed together (one cost centre)."""

    name = models.CharField(_("name"), max_length=100, unique=True)
    slug = models.SlugField(_("slug"), max_length=50, unique=True)
    cost_centre = models.CharField(
        _("cost-centre code"), max_length=32, validators=[cost_centre_validator],
        help_text=_("The code finance books this team's costs to."),
    )
    created_at = models.DateTimeField(_("created"), auto_now_add=True)

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        db_table = "accounting_team"
        verbose_name = _("team")
        verbose_name_plural = _("teams")

    def __str__(self) -> str:
        return self.name


class ProjectQuerySet(models.QuerySet):
    def visible_to(self, user) -> ProjectQuerySet:
        return self.filter(team__in=Team.objects.visible_to(user))


class Project(models.Model):
    """A line of work inside a team that usage and costs are split by."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="projects", verbose_name=_("team"))
    name = models.CharField(_("name"), max_length=100)
    slug = models.SlugField(_("slug"), max_length=50)
    active = models.BooleanField(_("active"), default=True)

    objects = ProjectQuerySet.as_manager()

    class Meta:
        ordering = ["team__name", "name"]
        db_table = "accounting_project"
        verbose_name = _("project")
        verbose_name_plural = _("projects")
        constraints = [
            models.UniqueConstraint(fields=["team", "slug"], name="project_unique_slug_per_team"),
            models.UniqueConstraint(Lower("name"), "team", name="project_unique_name_per_team"),
        ]

    def __str__(self) -> str:
        return f"{self.team.slug}/{self.slug}"


class MembershipQuerySet(models.QuerySet):
    def visible_to(self, user) -> MembershipQuerySet:
        return self.filter(team__in=Team.objects.visible_to(user))


class Membership(models.Model):
    """A person's role in one team: lead (books for the team, sees its costs) or engineer."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships", verbose_name=_("user")
    )
    team = models.ForeignKey(Team, on_delete=models.CASCADE, related_name="memberships", verbose_name=_("team"))
    role = models.CharField(_("role"), max_length=16, choices=TeamRole.choices, default=TeamRole.ENGINEER)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        ordering = ["team__name", "role", "user__username"]
        db_table = "accounting_membership"
        verbose_name = _("membership")
        verbose_name_plural = _("memberships")
        constraints = [
            models.UniqueConstraint(fields=["user", "team"], name="membership_one_role_per_team"),
            models.CheckConstraint(condition=models.Q(role__in=TeamRole.values), name="membership_known_role"),
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.get_role_display()} · {self.team}"
