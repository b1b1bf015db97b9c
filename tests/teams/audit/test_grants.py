"""The application's database role (teams.audit.grants): under it, the audit trail and the ledger take
inserts and reads but refuse UPDATE, DELETE and TRUNCATE with PostgreSQL's permission error (42501), while
an ordinary table is still updated. The test connection is the owner; ``SET LOCAL ROLE`` switches it to
the application's role for one transaction."""
# ruff: noqa: S608 (the SQL names tables from the models' own meta, never input)

from datetime import date

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from psycopg import sql

from accounting.models import LedgerEntry, Statement
from teams.audit.grants import ensure_role, grant_app_rights, table_rights
from teams.audit.models import AuditEntry, AuditKind
from teams.audit.records import audit_record
from teams.models import Team
from tests.conftest import T0

pytestmark = pytest.mark.django_db
INSUFFICIENT_PRIVILEGE = "42501"
AUDIT, LEDGER = AuditEntry._meta.db_table, LedgerEntry._meta.db_table


@pytest.fixture
def ledger_row(team_a):
    statement = Statement.objects.create(period=date(2026, 10, 1), revision=1, status="closed", currency="CNY",
                                         closed_at=T0)
    return LedgerEntry.objects.create(statement=statement, day=date(2026, 10, 5), team=team_a, kind="busy",
                                      rate="1", rate_valid_from=date(2026, 10, 1), ticks=840_000)


@pytest.fixture
def audit_row(team_a):
    with transaction.atomic():
        return audit_record(kind=AuditKind.MEMBERSHIP, subject="membership 1", before=None, after={"role": "lead"},
                            team_id=team_a.pk, now=T0)


def as_app_role(statement: str, params=()):
    """Run ``statement`` as the application's role, in a savepoint that is rolled back; its error's SQLSTATE
    (None when it succeeded)."""
    role = sql.Identifier(settings.CARDHOUR_DB_APP_ROLE)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql.SQL("SET LOCAL ROLE {}").format(role).as_string(cursor.connection))
            cursor.execute("SELECT current_user")
            assert cursor.fetchone()[0] == settings.CARDHOUR_DB_APP_ROLE
            cursor.execute(statement, params)
            transaction.set_rollback(True)
    except DatabaseError as error:
        return getattr(error.__cause__, "sqlstate", "?")
    return None


def test_the_test_database_was_granted_after_migrating():
    for table in (AUDIT, LEDGER):
        assert table_rights(connection, settings.CARDHOUR_DB_APP_ROLE, table) == {"SELECT", "INSERT"}
    assert table_rights(connection, settings.CARDHOUR_DB_APP_ROLE, Team._meta.db_table) == {
        "SELECT", "INSERT", "UPDATE", "DELETE", "TRUNCATE"}


@pytest.mark.parametrize("statement", [f"UPDATE {AUDIT} SET subject = 'rewritten'", f"DELETE FROM {AUDIT}",
                                       f"TRUNCATE {AUDIT}"])
def test_the_app_role_cannot_change_audit_rows(audit_row, statement):
    assert as_app_role(statement) == INSUFFICIENT_PRIVILEGE
    audit_row.refresh_from_db()
    assert audit_row.subject == "membership 1"


@pytest.mark.parametrize("statement", [f"UPDATE {LEDGER} SET ticks = 1", f"DELETE FROM {LEDGER}",
                                       f"TRUNCATE {LEDGER} CASCADE"])
def test_the_app_role_cannot_change_ledger_rows(ledger_row, statement):
    assert as_app_role(statement) == INSUFFICIENT_PRIVILEGE
    ledger_row.refresh_from_db()
    assert ledger_row.ticks == 840_000


def test_the_app_role_inserts_and_reads_both(ledger_row, team_a):
    insert_audit = (f"INSERT INTO {AUDIT} (changed_at, actor, kind, subject, after) "
                    "VALUES (%s, 'task:test', 'booking', 'booking 9', '{}')")
    assert as_app_role(insert_audit, [T0]) is None
    insert_ledger = (f"INSERT INTO {LEDGER} (statement_id, day, team_id, kind, rate, rate_valid_from, ticks, created_at) "
                     "VALUES (%s, %s, %s, 'idle', 1, %s, 5, %s)")
    assert as_app_role(insert_ledger, [ledger_row.statement_id, date(2026, 10, 6), team_a.pk, date(2026, 10, 1), T0]) is None
    assert as_app_role(f"SELECT count(*) FROM {AUDIT}, {LEDGER}") is None


def test_the_app_role_updates_an_ordinary_table(team_a):
    assert as_app_role(f"UPDATE {Team._meta.db_table} SET name = 'Renamed' WHERE id = %s", [team_a.pk]) is None
    assert as_app_role(f"DELETE FROM {Team._meta.db_table} WHERE id = -1") is None


def test_the_trigger_still_refuses_the_owner(audit_row, ledger_row):
    """A second guard for whoever owns the tables (migrations, an operator's shell)."""
    for statement in (f"UPDATE {AUDIT} SET subject = 'x'", f"UPDATE {LEDGER} SET ticks = 2"):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement)


def test_granting_again_is_idempotent_and_a_missing_role_is_made(capsys):
    """Roles are cluster-wide: another database (a parallel test run) may create it at the same moment;
    ensure_role tolerates that, and the command reports the rights it leaves."""
    assert ensure_role(connection, settings.CARDHOUR_DB_APP_ROLE) is False  # made when this database migrated
    assert grant_app_rights(connection, settings.CARDHOUR_DB_APP_ROLE) == [AUDIT, LEDGER]
    call_command("db_app_role")
    out = capsys.readouterr().out
    assert f"{AUDIT}: INSERT, SELECT" in out and f"{LEDGER}: INSERT, SELECT" in out


def test_a_role_name_that_is_not_a_plain_name_is_refused():
    with pytest.raises(ValueError, match="lower-case SQL name"):
        grant_app_rights(connection, 'x"; DROP TABLE teams_auditentry; --')
