from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.utils import timezone

from teams.models import ApiToken
from teams.tokens import ApiTokenKind

SERVICE_PREFIX = "svc-"


class Command(BaseCommand):
    help = (
        "Issue an API token and print it once (only its hash is stored). Either for a person "
        "(--user NAME) or for a service such as a scheduler hook (--service NAME, which acts as the "
        "service account 'svc-NAME', created without a password if missing)."
    )

    def add_arguments(self, parser):
        who = parser.add_mutually_exclusive_group(required=True)
        who.add_argument("--user", help="username the token acts as")
        who.add_argument("--service", help="service name, e.g. slurm; the token acts as svc-NAME")
        parser.add_argument("--name", help="what the token is for (default: the user or service name)")
        parser.add_argument("--days", type=int, help="expire after this many days (default: never)")

    @transaction.atomic
    def handle(self, *args, user=None, service=None, name=None, days=None, **options):
        if days is not None and days <= 0:
            raise CommandError("--days must be a positive number of days.")
        users = get_user_model().objects
        if service:
            account, created = users.get_or_create(username=SERVICE_PREFIX + service)
            if created:
                account.set_unusable_password()
                account.save(update_fields=["password"])
            kind = ApiTokenKind.SERVICE
        else:
            account = users.filter(username=user).first()
            if account is None:
                raise CommandError(f"--user: no user named {user!r}.")
            kind = ApiTokenKind.PERSONAL
        expires_at = timezone.now() + timedelta(days=days) if days else None
        _token, raw = ApiToken.issue(user=account, name=name or service or user, kind=kind, expires_at=expires_at)
        self.stdout.write(raw)
