"""What the scenarios need in the database, made in the harness's own process: the fleet's nodes with
their agents' URLs and tokens, an admin who browses, and (for the kill scenario) a team whose job held a
GPU last month at a price, so that the usage and the close of last month write rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

GPU_SHARE = 840_000  # core.units: one whole GPU


@dataclass
class Browser:
    """How the probes sign in: a session cookie for the pages, a bearer token for the API."""

    session_cookie: str
    api_token: str


def register_nodes(tokens: dict[str, dict]) -> list[int]:
    """Register each node of a fleet's token file (the demo loader's way: URL and token from the file)."""
    from cluster.inventory.services import node_register
    from cluster.models import Node

    ids = []
    for hostname, entry in sorted(tokens.items()):
        node = Node.objects.filter(hostname=hostname).first()
        if node is None:
            node, _token = node_register(hostname=hostname, agent_url=entry["url"])
        node.agent_url, node.agent_token = entry["url"], entry["token"]
        node.save(update_fields=["agent_url", "agent_token"])
        ids.append(node.pk)
    return ids


def retire_nodes(hostnames) -> None:
    """Take nodes out of collection (a scenario's extra nodes, once it is done with them)."""
    from cluster.choices import NodeStatus
    from cluster.models import Node

    Node.objects.filter(hostname__in=list(hostnames)).update(status=NodeStatus.RETIRED)


def admin_browser() -> Browser:
    from django.contrib.auth import get_user_model
    from django.test import Client

    from teams.tokens import ApiToken

    user, _created = get_user_model().objects.get_or_create(
        username="chaos-admin", defaults={"is_staff": True, "is_superuser": True, "email": "chaos@localhost"})
    client = Client()
    client.force_login(user)
    _token, raw = ApiToken.issue(user=user, name="chaos probes")
    return Browser(session_cookie=client.cookies["sessionid"].value, api_token=raw)


def last_month_with_usage(*, now) -> dict:
    """A team's job on the first GPU for a day of last month, and an H100 price from last month on; the
    allocation's trigger marks those days for recount. Returns the period and what was made."""
    from accounting.models import RateCard
    from cluster.models import Allocation, Gpu, Job
    from core.timeutils import business_day_bounds, business_today, previous_month
    from teams.models import Project, Team

    first = previous_month(business_today(now=now))
    gpu = Gpu.objects.filter(mig_parent__isnull=True).select_related("model").order_by("node__hostname", "index").first()
    if gpu is None:
        raise RuntimeError("no GPU collected yet: the fleet's inventory never reached the database")
    team, _created = Team.objects.get_or_create(slug="chaos", defaults={"name": "Chaos"})
    project, _created = Project.objects.get_or_create(team=team, slug="faults", defaults={"name": "Faults"})
    start = business_day_bounds(first + timedelta(days=2))[0] + timedelta(hours=9)
    end = start + timedelta(hours=26)
    job, _created = Job.objects.get_or_create(
        source="api", external_id="chaos-1", start_time=start,
        defaults={"team": team, "project": project, "state": "completed", "end_time": end, "name": "chaos"})
    Allocation.objects.get_or_create(job=job, gpu=gpu, defaults={"share": GPU_SHARE, "start": start, "end": end})
    RateCard.objects.get_or_create(gpu_model=gpu.model, valid_from=first,
                                   defaults={"price_per_card_hour": Decimal("10"), "currency": _currency()})
    return {"period": first, "gpu": gpu.pk, "start": start, "end": end}


def _currency() -> str:
    from django.conf import settings

    return settings.CARDHOUR_CURRENCY
