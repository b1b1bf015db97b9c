from django.core.management.base import BaseCommand, CommandError

from cluster.inventory.services import agent_config_line, node_token_rotate
from cluster.models import Node


class Command(BaseCommand):
    help = "Issue a new agent token for a node; prints it once with the agent's token_sha256 line."

    def add_arguments(self, parser):
        parser.add_argument("hostname")

    def handle(self, *args, hostname, **options):
        node = Node.objects.filter(hostname=hostname).first()
        if node is None:
            raise CommandError(f"no node named {hostname!r}")
        token = node_token_rotate(node=node)
        self.stdout.write(f"New agent token for {hostname} (shown once): {token}")
        self.stdout.write(agent_config_line(token))
