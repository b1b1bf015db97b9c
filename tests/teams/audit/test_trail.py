"""The audit trail: each kind of change leaves exactly one row (who, when on the fixed clock, before and
after), a refused change leaves none, and the admin shows the rows but never edits them."""

import importlib
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import transaction
from django.urls import reverse

from accounting.models import MoneyChange, Statement
from accounting.money.close import CloseRefused, close_period, reopen_period
from accounting.money.services import quota_save
from cluster.bookings import watch as booking_watch
from cluster.bookings.services import BookingRefused, booking_cancel, booking_create
from cluster.inventory.services import node_token_rotate
from cluster.models import Booking, Gpu
from cluster.tasks import bookings_tick
from teams.audit.models import AuditEntry, AuditKind
from teams.audit.records import acting_as, audit_record
from teams.models import Membership, Team
from teams.roles import ADMIN_GROUP, FINANCE_GROUP, TeamRole
from teams.services import membership_delete, membership_set, team_delete
from tests.conftest import T0

pytestmark = pytest.mark.django_db
HOUR = timedelta(hours=1)


def only_row(kind: str) -> AuditEntry:
    rows = list(AuditEntry.objects.filter(kind=kind))
    assert len(rows) == 1, rows
    return rows[0]


def staff(user, *, superuser=True):
    """Django's admin site wants staff and model permissions: the admin is a superuser there."""
    user.is_staff, user.is_superuser = True, superuser
    user.save()
    return user


# ---- memberships and roles -------------------------------------------------------------------------------

def test_a_membership_created_changed_and_deleted_is_three_rows(admin_user, engineer_b, team_a):
    membership = membership_set(user=admin_user, team=team_a, member=engineer_b, role=TeamRole.ENGINEER, now=T0)
    made = only_row(AuditKind.MEMBERSHIP)
    assert (made.actor, made.changed_by, made.changed_at, made.team_id, made.object_id) == (
        "alice-admin", admin_user, T0, team_a.pk, membership.pk)
    assert made.before is None and made.after == {"user": "bea-eng-b", "team": "alpha", "role": "engineer"}

    membership_set(user=admin_user, team=team_a, member=engineer_b, role=TeamRole.LEAD, now=T0 + HOUR)
    membership_delete(user=admin_user, membership=Membership.objects.get(pk=membership.pk), now=T0 + 2 * HOUR)
    deleted, changed, _made = AuditEntry.objects.filter(kind=AuditKind.MEMBERSHIP)
    assert (changed.before["role"], changed.after["role"], changed.changed_at) == ("engineer", "lead", T0 + HOUR)
    assert (deleted.before["role"], deleted.after, deleted.changed_at) == ("lead", None, T0 + 2 * HOUR)


def test_setting_the_same_role_again_records_nothing(admin_user, engineer_a, team_a):
    membership_set(user=admin_user, team=team_a, member=engineer_a, role=TeamRole.ENGINEER, now=T0)
    assert not AuditEntry.objects.exists()


def test_the_admin_membership_form_and_team_inline_are_audited(client, admin_user, engineer_b, team_a):
    client.force_login(staff(admin_user))
    answer = client.post(reverse("admin:teams_membership_add"),
                         {"user": engineer_b.pk, "team": team_a.pk, "role": TeamRole.LEAD})
    assert answer.status_code == 302
    row = only_row(AuditKind.MEMBERSHIP)
    assert (row.actor, row.before, row.after["role"]) == ("alice-admin", None, "lead")

    membership = Membership.objects.get(user=engineer_b, team=team_a)
    answer = client.post(reverse("admin:teams_membership_delete", args=[membership.pk]), {"post": "yes"})
    assert answer.status_code == 302 and not Membership.objects.filter(pk=membership.pk).exists()
    deleted = AuditEntry.objects.filter(kind=AuditKind.MEMBERSHIP).first()
    assert (deleted.before["user"], deleted.after) == ("bea-eng-b", None)


def test_deleting_a_team_records_each_membership_it_takes(api, admin_user, make_user):
    team = Team.objects.create(name="Gamma", slug="gamma", cost_centre="CC-G")
    make_user("gil", team=team, role=TeamRole.LEAD)
    answer = api.as_user(admin_user).delete(f"/api/v1/teams/{team.slug}/")
    assert answer.status_code == 204
    row = only_row(AuditKind.MEMBERSHIP)
    assert (row.actor, row.team_id, row.before["user"], row.after) == ("alice-admin", team.pk, "gil", None)


def test_a_refused_team_delete_records_nothing(admin_user, team_a, engineer_a):
    """Team Alpha has a project (protected): the delete and its membership rows roll back together."""
    with pytest.raises(Exception, match="protected"):
        team_delete(user=admin_user, team=team_a)
    assert Membership.objects.filter(team=team_a).exists() and not AuditEntry.objects.exists()


def test_a_role_given_in_the_user_admin_is_recorded_with_the_groups(client, admin_user, engineer_a):
    client.force_login(staff(admin_user))
    finance = Group.objects.get_or_create(name=FINANCE_GROUP)[0]
    Group.objects.get_or_create(name=ADMIN_GROUP)
    form = {"username": engineer_a.username, "is_active": "on", "groups": [finance.pk],
            "date_joined_0": "2026-11-01", "date_joined_1": "00:00:00",
            "initial-date_joined_0": "2026-11-01", "initial-date_joined_1": "00:00:00"}
    with time_machine.travel(T0, tick=False):
        answer = client.post(reverse("admin:auth_user_change", args=[engineer_a.pk]), form)
    assert answer.status_code == 302, answer.content[:2000]
    row = only_row(AuditKind.ROLE)
    assert (row.actor, row.object_id, row.changed_at) == ("alice-admin", engineer_a.pk, T0)
    assert row.before == {"is_superuser": False, "is_staff": False, "groups": []}
    assert row.after == {"is_superuser": False, "is_staff": False, "groups": [FINANCE_GROUP]}


# ---- node tokens -----------------------------------------------------------------------------------------

def test_a_rotated_node_token_is_recorded_without_its_value(api, admin_user, small_cluster):
    node = small_cluster["nodes"][0]
    with time_machine.travel(T0, tick=False):
        answer = api.as_user(admin_user).post(f"/api/v1/nodes/{node.hostname}/rotate-token/")
    assert answer.status_code == 200
    token = answer.json()["token"]
    row = only_row(AuditKind.NODE_TOKEN)
    assert (row.actor, row.object_id, row.changed_at) == ("alice-admin", node.pk, T0)
    assert row.before == {"hostname": "h200-a", "agent_token": "none"}
    assert row.after == {"hostname": "h200-a", "agent_token": "rotated"}
    assert token not in str(row.before) + str(row.after) + row.subject


def test_a_token_typed_in_the_api_is_recorded_as_replaced(api, admin_user, small_cluster):
    node = small_cluster["nodes"][0]
    node_token_rotate(node=node, user=admin_user)
    answer = api.as_user(admin_user).patch(f"/api/v1/nodes/{node.hostname}/",
                                           {"agent_token": "x" * 32}, format="json")
    assert answer.status_code == 200
    latest = AuditEntry.objects.filter(kind=AuditKind.NODE_TOKEN).first()
    assert (latest.before["agent_token"], latest.after["agent_token"]) == ("set", "replaced")
    assert "x" * 32 not in str(latest.after)


def test_a_command_rotating_a_token_is_the_actor(small_cluster, capsys, monkeypatch):
    monkeypatch.setattr("sys.argv", ["manage.py", "node_rotate_token", "h200-a"])
    call_command("node_rotate_token", "h200-a")
    assert only_row(AuditKind.NODE_TOKEN).actor == "command:node_rotate_token"


# ---- bookings --------------------------------------------------------------------------------------------

@pytest.fixture
def gpus(small_cluster):
    return list(Gpu.objects.filter(node__hostname="h200-a").order_by("index"))


def test_a_booking_made_and_cancelled_is_two_rows(gpus, engineer_a, team_a):
    booking = booking_create(user=engineer_a, team=team_a, gpus=gpus, start=T0 + HOUR, end=T0 + 3 * HOUR, now=T0)
    made = only_row(AuditKind.BOOKING)
    assert (made.actor, made.changed_at, made.team_id, made.object_id, made.before) == (
        "ed-eng-a", T0, team_a.pk, booking.pk, None)
    assert made.after["status"] == "booked" and made.after["end"] == "2026-11-02T03:00:00+00:00"
    booking_cancel(user=engineer_a, booking=booking, now=T0 + HOUR / 2)
    cancelled = AuditEntry.objects.filter(kind=AuditKind.BOOKING).first()
    assert (cancelled.before["status"], cancelled.after["status"], cancelled.changed_at) == (
        "booked", "cancelled", T0 + HOUR / 2)


def test_a_refused_booking_leaves_no_row(gpus, engineer_a, engineer_b, team_a, team_b):
    booking_create(user=engineer_a, team=team_a, gpus=gpus, start=T0 + HOUR, end=T0 + 3 * HOUR, now=T0)
    with pytest.raises(BookingRefused):
        booking_create(user=engineer_b, team=team_b, gpus=gpus, start=T0 + HOUR, end=T0 + 2 * HOUR, now=T0)
    assert AuditEntry.objects.filter(kind=AuditKind.BOOKING).count() == 1


def test_the_watcher_task_ends_a_booking_as_itself(gpus, engineer_a, team_a):
    booking = booking_create(user=engineer_a, team=team_a, gpus=gpus, start=T0, end=T0 + HOUR, now=T0)
    with time_machine.travel(T0 + 2 * HOUR, tick=False):
        bookings_tick.apply()
    ended = AuditEntry.objects.filter(kind=AuditKind.BOOKING).first()
    assert (ended.actor, ended.changed_by, ended.changed_at) == ("task:cluster.tasks.bookings_tick", None, T0 + 2 * HOUR)
    assert (ended.object_id, ended.before["status"], ended.after["status"]) == (booking.pk, "booked", "ended")
    booking_watch.watch(now=T0 + 3 * HOUR)  # rerun: nothing left to end, nothing recorded
    assert AuditEntry.objects.filter(kind=AuditKind.BOOKING).count() == 2
    assert Booking.objects.get().status == "ended"


# ---- money and periods -----------------------------------------------------------------------------------

def test_a_quota_change_is_in_the_trail_and_in_money_changes(finance_user, team_a):
    with time_machine.travel(T0, tick=False):
        quota = quota_save(user=finance_user, team=team_a, gpu_model=None, period_start=date(2026, 11, 1),
                           expires=date(2026, 12, 1), card_hours=Decimal(100))
    row = only_row(AuditKind.QUOTA)
    assert (row.actor, row.changed_at, row.team_id, row.object_id) == ("fred-finance", T0, team_a.pk, quota.pk)
    assert row.after["card_hours"] == "100.000" and row.before is None
    assert MoneyChange.objects.get().pk == row.pk


def test_closing_and_reopening_a_period_is_two_rows(finance_user):
    """November 2026 with no nodes and no usage closes empty; reopening needs finance and a reason."""
    statement = close_period(period=date(2026, 11, 1), now=datetime(2026, 12, 2, tzinfo=UTC))
    closed = only_row(AuditKind.PERIOD)
    assert (closed.actor, closed.object_id, closed.before) == ("system", statement.pk, None)
    assert closed.after["status"] == "closed" and closed.subject == "period 2026-11 closed (revision 1)"
    with pytest.raises(CloseRefused):
        reopen_period(period=date(2026, 11, 1), user=finance_user, reason=" ")
    assert AuditEntry.objects.filter(kind=AuditKind.PERIOD).count() == 1
    reopen_period(period=date(2026, 11, 1), user=finance_user, reason="late usage",
                  now=datetime(2026, 12, 3, tzinfo=UTC))
    reopened = AuditEntry.objects.filter(kind=AuditKind.PERIOD).first()
    assert (reopened.actor, reopened.changed_at) == ("fred-finance", datetime(2026, 12, 3, tzinfo=UTC))
    assert (reopened.before["status"], reopened.after["status"], reopened.after["reopen_reason"]) == (
        "closed", "reopened", "late usage")
    assert Statement.objects.get().status == "reopened"


# ---- the record itself -----------------------------------------------------------------------------------

def test_a_rolled_back_change_takes_its_row_with_it(admin_user, engineer_b, team_a):
    with pytest.raises(RuntimeError, match="after"), transaction.atomic():
        membership_set(user=admin_user, team=team_a, member=engineer_b, role=TeamRole.LEAD, now=T0)
        raise RuntimeError("a failure after the change")
    assert not Membership.objects.filter(user=engineer_b, team=team_a).exists()
    assert not AuditEntry.objects.exists()


def test_a_process_names_itself_and_times_are_utc(team_a):
    shanghai = datetime(2026, 11, 2, 16, tzinfo=ZoneInfo("Asia/Shanghai"))
    with transaction.atomic(), acting_as("task:test"):
        audit_record(kind=AuditKind.MEMBERSHIP, subject="x", before=None, after={"a": 1}, now=shanghai)
    row = AuditEntry.objects.get()
    assert row.actor == "task:test" and row.changed_at == datetime(2026, 11, 2, 8, tzinfo=UTC)
    assert row.changed_at.utcoffset() == timedelta(0)
    with pytest.raises(ValueError, match="aware"), transaction.atomic():
        audit_record(kind=AuditKind.MEMBERSHIP, subject="x", before=None, after={"a": 1}, now=datetime(2026, 11, 2))  # noqa: DTZ001


def test_the_admin_lists_audit_rows_but_never_edits_them(client, admin_user, finance_user, team_a, engineer_b):
    membership_set(user=admin_user, team=team_a, member=engineer_b, role=TeamRole.LEAD, now=T0)
    row = AuditEntry.objects.get()
    client.force_login(staff(admin_user))
    listing = client.get(reverse("admin:teams_auditentry_changelist"), {"kind__exact": "membership"})
    assert listing.status_code == 200 and "bea-eng-b in alpha" in listing.content.decode()
    assert client.get(reverse("admin:teams_auditentry_change", args=[row.pk])).status_code == 200
    posted = client.post(reverse("admin:teams_auditentry_change", args=[row.pk]), {"subject": "rewritten"})
    assert posted.status_code == 403
    assert client.post(reverse("admin:teams_auditentry_delete", args=[row.pk]), {"post": "yes"}).status_code == 403
    assert client.get(reverse("admin:teams_auditentry_add")).status_code == 403
    row.refresh_from_db()
    assert row.subject.startswith("membership") and AuditEntry.objects.count() == 1
    client.force_login(staff(finance_user, superuser=False))  # finance reads money changes, not the whole trail
    assert client.get(reverse("admin:teams_auditentry_changelist")).status_code == 403



def test_the_migration_reads_each_old_money_subject():
    """0018 moved MoneyChange's rows in: their kind and object come from the subjects the services wrote."""
    move = importlib.import_module("accounting.migrations.0018_money_changes_in_audit_trail")
    assert move.kind_and_id("charge policy") == ("charge_policy", 1)
    assert move.kind_and_id("rate card 12 (H200); priced closed 2026-11") == ("rate_card", 12)
    assert move.kind_and_id("energy tariff 3") == ("energy_tariff", 3)
    assert move.kind_and_id("quota 5 (Team Beta)") == ("quota", 5)
