"""``manage.py close_period 2026-11``: close a month (accounting.money.close.close_period) and print its statement:
revision, ledger entries, the total per team and the statement total. Closing a closed month prints its
statement and adds nothing. A refusal prints every problem, one a line, and exits non-zero.

``--reopen --reason "…" --user USERNAME`` reopens the month instead (the user must be finance or an
admin); ``--user`` on a close records who closed it (finance or an admin too)."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from accounting.management.commands.export_statement import period_argument
from accounting.models import LedgerEntry
from accounting.money.close import CloseRefused, close_period, reopen_period
from accounting.money.statements import (
    TOTAL_KIND,
    closed_statement_id,
    period_label,
    statement_rows,
    total_of,
)
from teams.roles import sees_all_teams


class Command(BaseCommand):
    help = (
        "Close a billing month (YYYY-MM): refused while its data is incomplete or usage has no price (every "
        "problem is listed); closing twice adds nothing. With --reopen --reason --user, reopen it instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("period", help="the month, YYYY-MM (e.g. 2026-11)")
        parser.add_argument("--reopen", action="store_true", help="reopen the closed month instead of closing it")
        parser.add_argument("--reason", default="", help="why the month is reopened (required with --reopen)")
        parser.add_argument("--user", help="username of the finance or admin user acting (required with --reopen)")

    def handle(self, *args, period: str, reopen: bool, reason: str, user: str | None, **options):
        first = period_argument(period)
        label = period_label(first)
        acting = self._user(user, required=reopen)
        if reopen:
            if not reason.strip():
                raise CommandError("--reason: say why the period is reopened")
            try:
                statement = reopen_period(period=first, user=acting, reason=reason)
            except CloseRefused as refused:
                raise CommandError(self._problems(f"{label} was not reopened:", refused)) from None
            self.stdout.write(f"Reopened {label}: statement r{statement.revision} is now reopened "
                              f"(reason: {statement.reopen_reason}). Close it again with manage.py close_period {label}.")
            return
        now, already = timezone.now(), closed_statement_id(first)
        try:
            statement = close_period(period=first, user=acting, now=now)
        except CloseRefused as refused:
            raise CommandError(self._problems(f"{label} cannot be closed:", refused)) from None
        if statement.pk != already and statement.closed_at == now:
            self.stdout.write(f"Closed {label}: statement r{statement.revision}.")
        else:
            self.stdout.write(f"{label} was already closed ({statement.closed_at.isoformat()}): statement "
                              f"r{statement.revision}, unchanged.")
        self._print_statement(statement)

    def _user(self, username: str | None, *, required: bool):
        if username is None:
            if required:
                raise CommandError("--user: name the finance or admin user who reopens the period")
            return None
        found = get_user_model().objects.filter(username=username).first()
        if found is None:
            raise CommandError(f"--user: no user is called {username!r}")
        if not sees_all_teams(found):
            raise CommandError(f"--user: {username} is neither finance nor an admin")
        return found

    @staticmethod
    def _problems(heading: str, refused: CloseRefused) -> str:
        return "\n".join([heading, *(f"  - {problem}" for problem in refused.problems)])

    def _print_statement(self, statement) -> None:
        rows = statement_rows(statement)
        entries = LedgerEntry.objects.filter(statement=statement).count()
        self.stdout.write(f"  {entries} ledger entries, {len(rows)} rows, currency {statement.currency}")
        for row in rows:
            if row["kind"] == TOTAL_KIND:
                self.stdout.write(f"  {row['team']} ({row['cost_centre']}): {format(row['amount'], 'f')}")
        self.stdout.write(f"  Total: {format(total_of(rows, currency=statement.currency), 'f')} {statement.currency}")
