"""The demo data set: a simulated cluster, teams and a user for every role. Idempotent: loading it
again changes nothing. Values (models, memory, MIG profiles) follow the real nvidia-smi captures in
shared/data/nvidia-smi/."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from accounting.usage.services import backfill_done, backfill_started
from agents.backends.gpu_models import TOTAL_SLICES, find_model
from cluster.choices import NodeStatus
from cluster.inventory.services import node_token_set
from cluster.inventory.sync import mig_shares
from cluster.models import Gpu, GpuModel, IdentityKind, Node, TeamIdentity
from cluster.status.services import node_status_set
from core.timeutils import business_today, previous_month
from demo.bookings import MAINTENANCE_NODE, load_demo_bookings
from demo.history import RECENT_DAYS, history_window, load_demo_history, part_loaded
from demo.money import close_last_month, load_demo_money
from demo.plans import load_demo_plans
from teams.models import Project, Team
from teams.roles import ADMIN_GROUP, FINANCE_GROUP, TeamRole
from teams.services import membership_set, roles_record, stored_roles

DEMO_PASSWORD = "cardhour-demo"  # noqa: S105 (the documented demo password)
UUID_NAMESPACE = uuid.UUID("6f1c3a52-8f0e-4c1e-9a53-2b7d7e0c9d11")

GPU_MODELS = [
    # NVML name, short name, memory MiB
    ("NVIDIA H200", "H200", 143771),
    ("NVIDIA H100 80GB HBM3", "H100", 81559),
    ("NVIDIA L40S", "L40S", 46068),
]

# hostname prefix, pool, model short name, node count
NODE_GROUPS = [
    ("gpu-h200", "train", "H200", 4),
    ("gpu-h100", "train", "H100", 2),
    ("gpu-l40s", "infer", "L40S", 2),
]
GPUS_PER_NODE = 8
# GPU 0 of gpu-h100-01 is MIG-partitioned as in the H100 capture (3g + 2g + 1g + 1g of 7 slices): the
# simulator's layout (agents/backends/gpu_models.py), so the demo's instances are the ones the simulated
# agent of that node reports, with the shares the inventory sync gives them.
MIG_NODE, MIG_GPU_INDEX = "gpu-h100-01", 0
MIG_LAYOUT = find_model("H100").mig_layout

TEAMS = [
    # name, slug, cost centre, projects
    ("LLM Training", "llm", "CC-3100", ["Pretraining", "Alignment"]),
    ("Vision Research", "vision", "CC-2040", ["Detection", "Video generation"]),
    ("Inference Platform", "inference", "CC-1200", ["Serving", "Evaluation"]),
]

# The simulated fleet's unix users (agents/backends/sim_workloads.py USERS) and the team slug and
# project their GPU processes are charged to, so the jobs observed on the demo fleet have teams.
UNIX_USERS = {
    "alice": ("llm", "Pretraining"), "bob": ("llm", "Pretraining"), "carol": ("llm", "Alignment"),
    "dave": ("llm", "Alignment"), "erin": ("vision", "Detection"), "frank": ("vision", "Detection"),
    "grace": ("vision", "Video generation"), "heidi": ("vision", "Video generation"),
    "ivan": ("inference", "Serving"), "judy": ("inference", "Serving"), "wei": ("inference", "Evaluation"),
    "lin": ("inference", "Evaluation"),
}


@dataclass(frozen=True)
class DemoLogin:
    username: str
    role: str


USERS = [
    # username, full name, global group, [(team slug, role)]
    ("admin", "Ada Admin", ADMIN_GROUP, []),
    ("finance", "Fei Finance", FINANCE_GROUP, []),
    ("lead-llm", "Li Lead", None, [("llm", TeamRole.LEAD)]),
    ("eng-llm", "Eli Engineer", None, [("llm", TeamRole.ENGINEER)]),
    ("lead-vision", "Vera Lead", None, [("vision", TeamRole.LEAD)]),
    ("eng-vision", "Wang Engineer", None, [("vision", TeamRole.ENGINEER)]),
    ("lead-inference", "Ines Lead", None, [("inference", TeamRole.LEAD)]),
]


def demo_gpu_uuid(hostname: str, index: int, mig_slot: int | None = None) -> str:
    """Stable, NVML-shaped UUIDs (``GPU-…``, ``MIG-…``) so reloading finds the same GPUs."""
    key = f"{hostname}/{index}" + ("" if mig_slot is None else f"/mig{mig_slot}")
    prefix = "GPU" if mig_slot is None else "MIG"
    return f"{prefix}-{uuid.uuid5(UUID_NAMESPACE, key)}"


def demo_history_days(*, now: datetime) -> int:
    """The default history: from the first day of the month three months before this one, so three full
    months lie behind this one (the monthly profile projects next month's need from them)."""
    today = business_today(now=now)
    return (today - previous_month(previous_month(previous_month(today)))).days


@transaction.atomic
def load_demo(*, agents: dict | None = None, history_days: int | None = None, recent_only: bool = False) -> list[DemoLogin]:
    """Load the data set. ``agents`` is the simulated fleet's token file (agents/fleet.py): hostname →
    {"url", "token"}; its nodes get that URL and token so the collector can pull them. ``history_days``
    business days of usage history (jobs, minute rollups, an outage) are generated before the agents'
    backfill window (demo/history.py); None: :func:`demo_history_days` (three full months before this
    one), with last month closed (demo/money.py) and this month open; 0 generates none. With
    ``recent_only``, only the last :data:`demo.history.RECENT_DAYS` of them, and the boards say that
    the older ones are still loading until :func:`load_demo_older` has loaded them."""
    models = {
        short: GpuModel.objects.update_or_create(name=name, defaults={"short_name": short, "memory_mib": mib})[0]
        for name, short, mib in GPU_MODELS
    }
    port = 9400
    for prefix, pool, short, count in NODE_GROUPS:
        for number in range(1, count + 1):
            hostname = f"{prefix}-{number:02d}"
            status = NodeStatus.MAINTENANCE if hostname == MAINTENANCE_NODE else NodeStatus.UP
            agent = (agents or {}).get(hostname, {})
            node, created = Node.objects.update_or_create(
                hostname=hostname,
                defaults={
                    "pool": pool, "agent_url": agent.get("url", f"http://127.0.0.1:{port}"),
                    "labels": {"rack": f"r{1 + port % 3}", "fabric": "ib" if pool == "train" else "eth"},
                },
            )
            if agent.get("token") and node.agent_token != agent["token"]:
                node_token_set(node=node, token=agent["token"])  # audited, as load_demo
            if created or (node.status != status and status == NodeStatus.MAINTENANCE):
                node_status_set(node=node, status=status, reason="demo data set")
            port += 1
            _load_gpus(node, models[short])
    _load_teams_and_users()
    load_demo_bookings()
    now = timezone.now()
    history_days = demo_history_days(now=now) if history_days is None else history_days
    if history_days:
        first = history_days if not recent_only else min(history_days, RECENT_DAYS)
        load_demo_history(days=first, now=now)
        start, end = history_window(days=history_days, now=now)
        older = history_window(days=history_days, now=now, older_than=first)
        if older[1] > older[0] and not part_loaded(older=True):
            backfill_started(start=older[0], before=older[1])
        load_demo_money(now=now, history_start=start, history_end=end, close=first == history_days)
        load_demo_plans(now=now)  # estimates, data readiness, queued and running jobs: the plan pages (issue 19)
    return [DemoLogin(username, group or ", ".join(f"{r} of {t}" for t, r in teams)) for username, _n, group, teams in USERS]


def load_demo_older(*, history_days: int | None = None, now: datetime | None = None) -> dict:
    """The older part of the history that ``load_demo(recent_only=True)`` left (demo/history.py), then last
    month's close; the boards' "still loading" notice ends with it. Idempotent."""
    now = now or timezone.now()
    history_days = demo_history_days(now=now) if history_days is None else history_days
    try:
        result = load_demo_history(days=history_days, now=now, older_than=min(history_days, RECENT_DAYS))
        result["money"] = close_last_month(now=now)
        result["plans"] = load_demo_plans(now=now)  # the older jobs' estimates and data readiness
    finally:
        backfill_done()
    return result


def _load_gpus(node: Node, model: GpuModel) -> None:
    for index in range(GPUS_PER_NODE):
        gpu, _created = Gpu.objects.update_or_create(
            uuid=demo_gpu_uuid(node.hostname, index),
            defaults={
                "node": node, "index": index, "model": model, "memory_mib": model.memory_mib,
                "pci_bus_id": f"00000000:{0x18 + index * 0x10:02X}:00.0",
            },
        )
        if node.hostname == MIG_NODE and index == MIG_GPU_INDEX:
            shares = mig_shares([
                {"gi_id": mig.gi_id, "slices": mig.slices, "total_slices": TOTAL_SLICES, "sm_count": mig.sm_count}
                for mig in MIG_LAYOUT
            ])
            for slot, (mig, share) in enumerate(zip(MIG_LAYOUT, shares, strict=True)):
                Gpu.objects.update_or_create(
                    uuid=demo_gpu_uuid(node.hostname, index, slot),
                    defaults={
                        "node": node, "index": index, "model": model, "memory_mib": mig.memory_mib,
                        "mig_parent": gpu, "mig_profile": mig.profile, "share": share,
                    },
                )


def _load_teams_and_users() -> None:
    teams = {}
    for name, slug, cost_centre, projects in TEAMS:
        team, _created = Team.objects.update_or_create(slug=slug, defaults={"name": name, "cost_centre": cost_centre})
        teams[slug] = team
        for project in projects:
            Project.objects.get_or_create(team=team, slug=slugify(project), defaults={"name": project})
    for unix_user, (slug, project) in UNIX_USERS.items():
        # get_or_create: a mapping an admin has since changed is left as it is
        TeamIdentity.objects.get_or_create(
            kind=IdentityKind.UNIX_USER, name=unix_user,
            defaults={"team": teams[slug], "project": Project.objects.get(team=teams[slug], slug=slugify(project))},
        )
    user_model = get_user_model()
    for username, full_name, group, memberships in USERS:
        first, last = full_name.split(" ", 1)
        user, created = user_model.objects.get_or_create(
            username=username, defaults={"first_name": first, "last_name": last, "email": f"{username}@example.com"}
        )
        if created:
            user.set_password(DEMO_PASSWORD)
        roles_before = stored_roles(user.pk) if not created else None
        user.is_staff = user.is_superuser = group == ADMIN_GROUP
        user.save()
        if group:
            user.groups.add(Group.objects.get_or_create(name=group)[0])
        roles_record(user=None, member=user, before=roles_before)  # audited as load_demo
        for slug, role in memberships:
            membership_set(user=None, team=teams[slug], member=user, role=role)
