"""``manage.py db_app_role``: create (if missing) and grant the application's database role, run as the
tables' owner. ``--login`` lets it log in (with ``CARDHOUR_DB_APP_PASSWORD`` as its password when set),
for the web, worker and beat to connect as it with a URL of their own."""

import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, connections

from teams.audit.grants import RoleMissing, ensure_role, grant_app_rights, table_rights


class Command(BaseCommand):
    help = ("Create and grant the application's database role (CARDHOUR_DB_APP_ROLE, default cardhour_app): "
            "full rights on every table except the audit trail and the ledger, where it may only insert and "
            "read. Run as the tables' owner after migrating; idempotent.")

    def add_arguments(self, parser):
        parser.add_argument("--login", action="store_true",
                            help="let the role log in (password from CARDHOUR_DB_APP_PASSWORD, if set)")
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS)

    def handle(self, *args, login=False, database=DEFAULT_DB_ALIAS, **options):
        name = settings.CARDHOUR_DB_APP_ROLE
        if not name:
            raise CommandError("CARDHOUR_DB_APP_ROLE is empty: no role to grant.")
        connection = connections[database]
        try:
            created = ensure_role(connection, name, login=login, password=os.environ.get("CARDHOUR_DB_APP_PASSWORD"))
        except RoleMissing as error:
            raise CommandError(f"The role {name} does not exist and {connection.settings_dict.get('USER')} may not "
                               "create it: create it as a role with CREATEROLE, then run this again.") from error
        tables = grant_app_rights(connection, name)
        self.stdout.write(f"{'Created' if created else 'Updated'} role {name}.")
        for table in tables:
            rights = ", ".join(sorted(table_rights(connection, name, table)))
            self.stdout.write(f"  {table}: {rights}")
