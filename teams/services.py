"""Writes to who belongs where (DESIGN.md §2), each audited in its own transaction (teams.audit): a team
membership and its role, a person's global roles (admin, finance: Django groups and the superuser flag),
and the deletions that take memberships with them (a team, a person)."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth import get_user_model
from django.db import transaction

from teams.audit.models import AuditKind
from teams.audit.records import audit_record, audit_values
from teams.models import Membership, Team


def _membership_subject(membership: Membership) -> str:
    return f"membership {membership.pk} ({membership.user.get_username()} in {membership.team.slug})"


def _record_membership(*, user, membership: Membership, before: dict | None, after: dict | None,
                       now: datetime | None = None) -> None:
    audit_record(kind=AuditKind.MEMBERSHIP, user=user, object_id=membership.pk, team_id=membership.team_id,
                 subject=_membership_subject(membership), before=before, after=after, now=now)


@transaction.atomic
def membership_save(*, user, membership: Membership, now: datetime | None = None) -> Membership:
    """Save ``membership`` (new, or with a changed person, team or role) and record the change."""
    before = None
    if membership.pk is not None:
        stored = Membership.objects.select_for_update().select_related("user", "team").filter(pk=membership.pk).first()
        before = audit_values(stored) if stored is not None else None
    membership.save()
    _record_membership(user=user, membership=membership, before=before, after=audit_values(membership), now=now)
    return membership


@transaction.atomic
def membership_set(*, user, team: Team, member, role: str, now: datetime | None = None) -> Membership:
    """Give ``member`` the ``role`` in ``team`` (creating the membership if needed)."""
    membership = Membership.objects.filter(team=team, user=member).first() or Membership(team=team, user=member)
    membership.role = role
    return membership_save(user=user, membership=membership, now=now)


@transaction.atomic
def membership_delete(*, user, membership: Membership, now: datetime | None = None) -> None:
    before, pk = audit_values(membership), membership.pk
    membership.delete()
    membership.pk = pk
    _record_membership(user=user, membership=membership, before=before, after=None, now=now)


@transaction.atomic
def team_delete(*, user, team: Team, now: datetime | None = None) -> None:
    """Delete ``team``; its memberships go with it, each recorded. Refused (ProtectedError, nothing
    recorded) while anything protected still refers to the team."""
    for membership in team.memberships.select_related("user", "team"):
        _record_membership(user=user, membership=membership, before=audit_values(membership), after=None, now=now)
    team.delete()


# ---- global roles ----------------------------------------------------------------------------------------

def user_roles(member) -> dict | None:
    """A person's global roles as the trail keeps them (None: no such person)."""
    if member is None or member.pk is None:
        return None
    return {"is_superuser": member.is_superuser, "is_staff": member.is_staff,
            "groups": sorted(member.groups.values_list("name", flat=True))}


def stored_roles(member_id: int | None) -> dict | None:
    """The roles as stored now (before a change is saved)."""
    member = get_user_model().objects.filter(pk=member_id).first() if member_id is not None else None
    return user_roles(member)


def roles_record(*, user, member, before: dict | None, now: datetime | None = None) -> None:
    """Record the change of ``member``'s global roles from ``before`` (:func:`stored_roles`) to now."""
    audit_record(kind=AuditKind.ROLE, user=user, object_id=member.pk, subject=f"roles of {member.get_username()}",
                 before=before, after=user_roles(member), now=now)


@transaction.atomic
def user_delete(*, user, member, now: datetime | None = None) -> None:
    """Delete a person: their memberships and roles go with them, each recorded."""
    for membership in member.memberships.select_related("user", "team"):
        _record_membership(user=user, membership=membership, before=audit_values(membership), after=None, now=now)
    audit_record(kind=AuditKind.ROLE, user=user, object_id=member.pk, subject=f"roles of {member.get_username()}",
                 before=user_roles(member), after=None, now=now)
    member.delete()
