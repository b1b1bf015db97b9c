from django.core.management.base import BaseCommand

from demo.cluster import DEMO_PASSWORD, load_demo


class Command(BaseCommand):
    help = "Load the demo cluster, teams and users (safe to run again: it changes nothing the second time)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--agents", metavar="FILE",
            help="the simulated fleet's token file (python -m agents fleet --token-file): nodes get its URLs and tokens",
        )
        parser.add_argument(
            "--history-days", type=int, default=None, metavar="N",
            help="business days of usage history before the agents' backfill (default: since the first day of last month; 0: none)",
        )

    def handle(self, *args, agents=None, history_days=None, **options):
        import json
        from pathlib import Path

        logins = load_demo(
            agents=json.loads(Path(agents).read_text()) if agents else None, history_days=history_days
        )
        self.stdout.write(self.style.SUCCESS(f"Demo data loaded. Logins (password '{DEMO_PASSWORD}' for all):"))
        for login in logins:
            self.stdout.write(f"  {login.username:<16} {login.role}")
