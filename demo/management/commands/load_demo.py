from django.core.management.base import BaseCommand

from demo.cluster import DEMO_PASSWORD, load_demo, load_demo_older
from demo.history import RECENT_DAYS


class Command(BaseCommand):
    help = "Load the demo cluster, teams and users (safe to run again: it changes nothing the second time)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--agents", metavar="FILE",
            help="the simulated fleet's token file (python -m agents fleet --token-file): nodes get its URLs and tokens",
        )
        parser.add_argument(
            "--history-days", type=int, default=None, metavar="N",
            help="business days of usage history before the agents' backfill (default: since the first day of "
                 "the month three months ago; 0: none)",
        )
        part = parser.add_mutually_exclusive_group()
        part.add_argument(
            "--recent-only", action="store_true",
            help=f"load only the last {RECENT_DAYS} days of the history; the boards say the rest is still loading",
        )
        part.add_argument(
            "--older", action="store_true",
            help="load the rest of the history that --recent-only left, then close last month",
        )

    def handle(self, *args, agents=None, history_days=None, recent_only=False, older=False, **options):
        import json
        import time
        from pathlib import Path

        if older:
            started = time.monotonic()
            result = load_demo_older(history_days=history_days)
            if result["skipped"]:
                self.stdout.write("The older demo history is already loaded.")
            else:
                refused = result["money"]["refused"]
                closed = f"last month not closed: {'; '.join(map(str, refused))}" if refused else "last month closed"
                self.stdout.write(self.style.SUCCESS(
                    f"Older demo history loaded in {time.monotonic() - started:.0f} s: {result['jobs']:,} jobs, "
                    f"{result['minute_rollups']:,} minute rollups; {closed}."))
            return
        logins = load_demo(
            agents=json.loads(Path(agents).read_text()) if agents else None, history_days=history_days,
            recent_only=recent_only,
        )
        self.stdout.write(self.style.SUCCESS(f"Demo data loaded. Logins (password '{DEMO_PASSWORD}' for all):"))
        for login in logins:
            self.stdout.write(f"  {login.username:<16} {login.role}")
