"""The application's database role (``settings.CARDHOUR_DB_APP_ROLE``, ``cardhour_app``): full rights on
every table of the schema except the append-only ones (the audit trail, the ledger), where it may only
insert and read, and EXECUTE on the schema's functions (among them the owner's functions that make and drop
the raw samples' partitions, which only a table's owner may do). Run as the tables' owner, after every migration (``post_migrate``) and by
``manage.py db_app_role``.

Roles belong to the whole PostgreSQL cluster and several databases (test databases, the demo) may
create the same one at once: creating it tolerates a concurrent creator. The grants themselves are
per database and idempotent.
"""

from __future__ import annotations

import re

from django.db import DatabaseError, transaction
from psycopg import sql

from teams.audit.models import append_only_models

ROLE_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
DUPLICATE_OBJECT, UNIQUE_VIOLATION, INSUFFICIENT_PRIVILEGE = "42710", "23505", "42501"
ALL_TABLE_RIGHTS = "SELECT, INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER"
APPEND_ONLY_REFUSED = "UPDATE, DELETE, TRUNCATE"


class RoleMissing(Exception):
    """The role does not exist and this connection may not create it."""


def check_role_name(name: str) -> str:
    if not ROLE_NAME.match(name):
        raise ValueError(f"CARDHOUR_DB_APP_ROLE must be a lower-case SQL name (letters, digits, _), not {name!r}")
    return name


def role_exists(cursor, name: str) -> bool:
    cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [name])
    return cursor.fetchone() is not None


def _sqlstate(error: DatabaseError) -> str | None:
    return getattr(error.__cause__, "sqlstate", None)


def ensure_role(connection, name: str, *, login: bool = False, password: str | None = None) -> bool:
    """Create the role (NOLOGIN unless ``login``) if it is missing; with ``login``, let it log in (with
    ``password`` when given). Returns whether this call created it. A concurrent creator's duplicate is
    not an error; a connection that may not create roles raises :class:`RoleMissing`."""
    role = sql.Identifier(check_role_name(name))
    created = False
    with connection.cursor() as cursor:
        if not role_exists(cursor, name):
            try:
                with transaction.atomic(using=connection.alias):
                    cursor.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(role).as_string(cursor.connection))
                created = True
            except DatabaseError as error:
                state = _sqlstate(error)
                if state == INSUFFICIENT_PRIVILEGE:
                    raise RoleMissing(name) from error
                if state not in (DUPLICATE_OBJECT, UNIQUE_VIOLATION):  # another database made it first
                    raise
        if login:
            statement = sql.SQL("ALTER ROLE {} LOGIN").format(role)
            if password:
                statement = sql.SQL("ALTER ROLE {} LOGIN PASSWORD {}").format(role, sql.Literal(password))
            cursor.execute(statement.as_string(cursor.connection))
    return created


def grant_app_rights(connection, name: str) -> list[str]:
    """Grant the role what the application needs on this database and schema; refuse it updates, deletes
    and truncates of the append-only tables. Returns those tables' names."""
    role = sql.Identifier(check_role_name(name))
    tables = [model._meta.db_table for model in append_only_models()]
    statements = [
        sql.SQL("GRANT CONNECT, TEMPORARY ON DATABASE {} TO {}").format(
            sql.Identifier(connection.settings_dict["NAME"]), role),
        sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(role),
        sql.SQL("GRANT " + ALL_TABLE_RIGHTS + " ON ALL TABLES IN SCHEMA public TO {}").format(role),
        sql.SQL("GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO {}").format(role),
        # The schema's functions, those revoked from PUBLIC too: the SECURITY DEFINER ones that do an owner's
        # narrow work for the application (the raw samples' day partitions, cluster migration 0013).
        sql.SQL("GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO {}").format(role),
    ]
    statements += [sql.SQL("REVOKE " + APPEND_ONLY_REFUSED + " ON {} FROM {}, PUBLIC").format(sql.Identifier(table), role)
                   for table in tables]
    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        for statement in statements:
            cursor.execute(statement.as_string(cursor.connection))
    return tables


def table_rights(connection, name: str, table: str) -> set[str]:
    """The rights ``name`` holds on ``table`` (for the command's report and the tests)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT privilege FROM unnest(ARRAY['SELECT','INSERT','UPDATE','DELETE','TRUNCATE']) AS privilege "
            "WHERE has_table_privilege(%s, %s, privilege)", [name, table])
        return {row[0] for row in cursor.fetchall()}
