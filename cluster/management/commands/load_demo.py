from django.core.management.base import BaseCommand

from cluster.demo import DEMO_PASSWORD, load_demo


class Command(BaseCommand):
    help = "Load the demo cluster, teams and users (safe to run again: it changes nothing the second time)."

    def handle(self, *args, **options):
        logins = load_demo()
        self.stdout.write(self.style.SUCCESS(f"Demo data loaded. Logins (password '{DEMO_PASSWORD}' for all):"))
        for login in logins:
            self.stdout.write(f"  {login.username:<16} {login.role}")
