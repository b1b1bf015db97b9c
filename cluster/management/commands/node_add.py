from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from cluster.inventory.services import agent_config_line, node_register


class Command(BaseCommand):
    help = (
        "Register a GPU node and issue its agent token. Prints the token once (the server keeps it "
        "encrypted) and the token_sha256 line to put in the agent's config."
    )

    def add_arguments(self, parser):
        parser.add_argument("hostname")
        parser.add_argument("--url", required=True, help="the agent's base URL, e.g. http://gpu01:9400")
        parser.add_argument("--pool", default="default", help="partition or node pool (default: default)")
        parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="repeatable")

    def handle(self, *args, hostname, url, pool, label, **options):
        labels = {}
        for item in label:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise CommandError(f"--label must be KEY=VALUE, not {item!r}")
            labels[key] = value
        try:
            node, token = node_register(hostname=hostname, agent_url=url, pool=pool, labels=labels)
        except ValidationError as error:
            raise CommandError("; ".join(f"{f}: {' '.join(m)}" for f, m in error.message_dict.items())) from None
        self.stdout.write(f"Registered {node.hostname} ({node.agent_url}).")
        self.stdout.write(f"Agent token (shown once): {token}")
        self.stdout.write("Put this line in the agent's config (/etc/cardhour/agent.toml):")
        self.stdout.write(agent_config_line(token))
