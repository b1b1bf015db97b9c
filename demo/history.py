"""A month of demo usage history (issues 6 and 14), so ``make demo`` opens on boards and a usage report
that look like a real cluster's: completed Slurm jobs on the demo GPUs with a daily and weekly rhythm
(demo/workloads.py: LLM pretraining near 95 %, Jupyter sessions idle through eight hours but for
bursts, endpoints at 10–30 % following the day, one GPU always full, one held idle for days), a few
unplaced (sacct-like) and MIG-slice jobs, node outages (1–2.6 % of the capacity down each day) and
sample gaps (demo/incidents.py), the nodes' maintenance windows, and a minute rollup for every physical
GPU and minute, generated in SQL (demo/telemetry.py).

The window is the ``days`` business days before today up to ``now - 7 h`` (on the hour), so it never
overlaps the simulated agents' 6-hour backfill. Jobs are packed per node in Python (several hundred,
a fixed seed, never on a booked GPU or in a maintenance window; a job cut by an outage failed).
The minute and hour rollups are generated in SQL from the stored jobs' allocations and the bookings,
each drawn from its profile (a booking runs what its purpose says), so the telemetry agrees with them:
nearly idle when free, no rows during an outage, a sample gap or a maintenance window. Then the usage
aggregates (``usage_process``: the triggers marked everything inserted).
64 GPUs × 30 days (2.7 M minute rollups) load in about 25–30 s here (as the flat history did), and
the commit's foreign-key checks take 10 s more.

Status history: load_demo creates the nodes, and so opens their first status period, at load time.
The history needs them up before that, so each node's history is made to start at the window's start:
closed periods are inserted before the first one (up; unreachable during an outage; maintenance during
a maintenance window, demo/bookings.py), and the first period is backdated to where the last of them
begins when it has the same status: so the node that load_demo put in maintenance is in maintenance
since its window began (this week's Monday, where the booking calendar draws it down). Nothing after
the first period is touched, so the open period and the order of the history stay as they were.

Two parts (issue 15: three full months, and the first page within 60 s): ``make demo`` loads the last
:data:`RECENT_DAYS` days before it serves (``load_demo_history(days=RECENT_DAYS)``, jobs ``demo-<n>``),
then the older months in the background (``load_demo_history(days=…, older_than=RECENT_DAYS)``: the same
generation over the window up to where the recent part begins, jobs ``demo-h<n>``, committed before its
marks are aggregated, so the worker's aggregation of the live day never waits on it). Each part is drawn
on its own; a job never crosses from one into the other.

Idempotent: when a part's jobs (Slurm ids ``demo-<n>``, ``demo-h<n>``) exist, it is not generated again; the
rollups are ``ON CONFLICT DO NOTHING`` and the status history only fills what precedes a node's first
period, so even a partial rerun adds nothing twice. Collection state is left to the collector.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from accounting.usage.services import usage_process
from cluster.choices import NodeStatus
from cluster.models import (
    Allocation,
    Gpu,
    GpuHold,
    HoldKind,
    IdentityKind,
    Job,
    JobSource,
    MaintenanceWindow,
    NodeStatusPeriod,
    TeamIdentity,
)
from core.timeutils import business_day_bounds, business_today
from demo.bookings import NOTE
from demo.incidents import incidents
from demo.telemetry import gpu_stretches, insert_hours, insert_minutes
from demo.workloads import (
    ALWAYS_FULL,
    BOOKED_WORK,
    IDLE,
    INTERACTIVE,
    LONG_IDLE,
    PlannedJob,
    Profile,
    always_full,
    long_idle,
    notebooks,
    pack,
    unplaced,
)

HISTORY_LAG = timedelta(hours=7)  # the agents backfill the last 6 hours
ID_PREFIX = "demo-"
OLDER_PREFIX = "demo-h"  # the older part's jobs (loaded in the background by `make demo`)
RECENT_DAYS = 8  # what `make demo` loads before it serves: yesterday's board and the seven days it compares with
SEED = 6
MINUTE, HOUR = timedelta(minutes=1), timedelta(hours=1)
# hostname prefix → (team slug, weight) of the jobs on its nodes
NODE_TEAMS = {
    "gpu-h200": (("llm", 9), ("vision", 1)),
    "gpu-h100": (("vision", 10), ("inference", 3)),
    "gpu-l40s": (("inference", 1),),
}
MIG_TEAMS = (("inference", 3), ("vision", 1))
IDLE_GPU = Profile(IDLE, 0, 0.004)  # the GPUs a job holds but does not use: a CUDA context (~0.5 GiB), nothing running
OUTAGE_REASON = "demo history: the agent did not answer"


def history_window(*, days: int, now: datetime, older_than: int | None = None) -> tuple[datetime, datetime]:
    """``[start, end)`` of the history: local midnight ``days`` business days ago up to ``now - 7 h``, on the
    hour; with ``older_than``, only up to where a history of that many days begins (the older part)."""
    start = business_day_bounds(business_today(now=now) - timedelta(days=days))[0]
    end = (now.astimezone(UTC) - HISTORY_LAG).replace(minute=0, second=0, microsecond=0)
    if older_than is not None:
        end = min(end, history_window(days=older_than, now=now)[0])
    return start, max(start, end)


def long_idle_start(*, days: int, now: datetime) -> datetime:
    """When :data:`demo.workloads.LONG_IDLE`'s session begins in a history of ``days`` days."""
    _host, _index, _team, _name, ago, hour = LONG_IDLE
    return business_day_bounds(business_today(now=now) - timedelta(days=min(ago, days)))[0] + hour * HOUR


def history_incidents(*, days: int, now: datetime) -> tuple[list[tuple], list[tuple]]:
    """(outages, sample gaps) of a history of ``days`` days, each (host, lo, hi) (demo/incidents.py)."""
    start, end = history_window(days=days, now=now)
    return incidents(start=start, end=end, maintenance=_maintenance(start, now))


def load_demo_history(*, days: int = 30, now: datetime | None = None, older_than: int | None = None) -> dict:
    """Generate the history (see the module docstring), or with ``older_than`` its older part, and aggregate
    it. Returns counts and the seconds each step took."""
    now = now or timezone.now()
    clock = time.perf_counter()
    result = _generate(days=days, now=now, older_than=older_than)
    if not result["skipped"]:
        result["seconds"]["commit"], clock = time.perf_counter() - clock - sum(result["seconds"].values()), time.perf_counter()
        result["usage"] = usage_process(now=now)  # the triggers marked what was inserted
        result["seconds"]["usage"] = time.perf_counter() - clock
    return result


def part_loaded(*, older: bool) -> bool:
    """Whether the recent part's jobs (``demo-<n>``) or, with ``older``, the older part's (``demo-h<n>``) exist."""
    jobs = Job.objects.filter(source=JobSource.SLURM)
    if older:
        return jobs.filter(external_id__startswith=OLDER_PREFIX).exists()
    return jobs.filter(external_id__regex=rf"^{ID_PREFIX}[0-9]+$").exists()


@transaction.atomic
def _generate(*, days: int, now: datetime, older_than: int | None) -> dict:
    start, end = history_window(days=days, now=now, older_than=older_than)
    prefix = ID_PREFIX if older_than is None else OLDER_PREFIX
    result = {"skipped": True, "jobs": 0, "allocations": 0, "status_periods": 0, "minute_rollups": 0,
              "hour_rollups": 0, "seconds": {}}
    if days <= 0 or end <= start or part_loaded(older=older_than is not None):
        return result
    gpus = list(
        Gpu.objects.filter(node__hostname__regex=r"^(" + "|".join(NODE_TEAMS) + r")-\d+$", mig_parent__isnull=True)
        .select_related("node", "model").order_by("node__hostname", "index")
    )
    if not gpus:
        return result
    clock = time.perf_counter()
    seconds = result["seconds"]
    result["skipped"] = False
    maintenance = _maintenance(start, now)
    outages, gaps = incidents(start=start, end=end, maintenance=maintenance)
    down = [(host, NodeStatus.UNREACHABLE, lo, hi, OUTAGE_REASON) for host, lo, hi in outages]
    down += [(host, NodeStatus.MAINTENANCE, lo, hi, reason) for host, lo, hi, reason in maintenance]
    result["status_periods"] = _status_history({g.node for g in gpus}, start, down)
    seconds["status"], clock = time.perf_counter() - clock, time.perf_counter()
    holds = _holds([g.pk for g in gpus], start, end)
    slices = list(Gpu.objects.filter(mig_parent__in=gpus).select_related("node", "model").order_by("pk"))
    plan = _plan(gpus, slices, start, end, holds, outages, long_idle_start(days=days, now=now),
                 random.Random(SEED if older_than is None else SEED + 100))
    stored, result["allocations"] = _store_jobs(plan, prefix)
    result["jobs"] = len(stored)
    seconds["jobs"], clock = time.perf_counter() - clock, time.perf_counter()
    physical = {g.pk for g in gpus}
    held = [(gpu_id, job.start, job.end, IDLE_GPU if job.profile.first_gpu_only and k else job.profile, n)
            for n, job in stored for k, gpu_id in enumerate(job.gpus) if gpu_id in physical]
    held += [(gpu_id, lo, hi, BOOKED_WORK.get(purpose, Profile()), int(lo.timestamp()) // 60 % 100_003)
             for gpu_id, kind, lo, hi, purpose in holds if kind == HoldKind.BOOKING]
    holes = [(g.pk, lo, hi) for g in gpus for host, lo, hi in outages + gaps if host == g.node.hostname]
    holes += [(gpu_id, lo, hi) for gpu_id, kind, lo, hi, _purpose in holds if kind == HoldKind.MAINTENANCE]
    stretches = gpu_stretches([g.pk for g in gpus], held=held, start=start, end=end, holes=holes)
    result["minute_rollups"] = insert_minutes(gpus, mig={s.mig_parent_id for s in slices}, stretches=stretches,
                                              start=start)
    seconds["minute_rollups"], clock = time.perf_counter() - clock, time.perf_counter()
    result["hour_rollups"] = insert_hours([g.pk for g in gpus], start=start, end=end)
    seconds["hour_rollups"] = time.perf_counter() - clock
    return result


# --- Status history ---------------------------------------------------------------------------------------

def _maintenance(start: datetime, now: datetime) -> list[tuple]:
    """(host, lo, hi, reason) of the maintenance windows that began before ``now`` and end after ``start``."""
    rows = MaintenanceWindow.objects.filter(start__lt=now, end__gt=start).values_list(
        "node__hostname", "start", "end", "reason").order_by("node__hostname", "start")
    return [(host, max(lo, start), hi, reason) for host, lo, hi, reason in rows]


def _status_history(nodes, start: datetime, down: list[tuple]) -> int:
    """Make each node's history start at ``start`` (see the module docstring); ``down``: (host, status, lo, hi,
    reason) of its outages and maintenance windows. Returns the periods inserted."""
    made = []
    for node in sorted(nodes, key=lambda n: n.hostname):
        first = NodeStatusPeriod.objects.filter(node=node).order_by("started_at").first()
        if first is None or first.started_at <= start:
            continue
        segments, at = [], start
        for _host, status, lo, hi, reason in sorted((d for d in down if d[0] == node.hostname), key=lambda d: d[2]):
            lo, hi = max(lo, at), min(hi, first.started_at)
            if hi > lo:
                segments += [(NodeStatus.UP, at, lo, "demo history")] if lo > at else []
                segments.append((status, lo, hi, reason))
                at = hi
        segments += [(NodeStatus.UP, at, first.started_at, "demo history")] if first.started_at > at else []
        if segments and segments[-1][0] == first.status:
            NodeStatusPeriod.objects.filter(pk=first.pk).update(started_at=segments.pop()[1])
        made += [NodeStatusPeriod(node=node, status=status, started_at=lo, ended_at=hi, reason=reason)
                 for status, lo, hi, reason in segments]
    NodeStatusPeriod.objects.bulk_create(made)
    return len(made)


# --- Jobs -------------------------------------------------------------------------------------------------

def _holds(gpu_ids: list[int], start: datetime, end: datetime) -> list[tuple]:
    """(GPU, kind, lo, hi, booking purpose) of the bookings and maintenance windows in the window: no demo
    job goes there."""
    rows = GpuHold.objects.filter(gpu_id__in=gpu_ids, active=True, during__overlap=(start, end)).values_list(
        "gpu_id", "kind", "during", "booking__note")
    return [(gpu_id, kind, max(during.lower, start), min(during.upper, end), (note or "").removeprefix(NOTE))
            for gpu_id, kind, during, note in rows]


def _plan(gpus: list[Gpu], slices: list[Gpu], start: datetime, end: datetime, holds: list[tuple],
          outages: list[tuple], idle_from: datetime, rng: random.Random) -> list[PlannedJob]:
    """Every job of the history: the always-full GPU's, the long-idle session, the notebook sessions on the
    interactive GPUs, then per node whole-GPU jobs and MIG-slice jobs on its slices, then the unplaced ones."""
    blocked: dict[int, list[tuple]] = {g.pk: [] for g in gpus}
    for gpu_id, _kind, lo, hi, _purpose in holds:
        blocked[gpu_id].append((lo, hi, False))
    by_node: dict[str, list[Gpu]] = {}
    for gpu in gpus:
        by_node.setdefault(gpu.node.hostname, []).append(gpu)
        blocked[gpu.pk] += [(lo, hi, True) for host, lo, hi in outages if host == gpu.node.hostname]
    plan = []
    special = {(g.node.hostname, g.index): g for g in gpus}
    if (full := special.get(ALWAYS_FULL[:2])) is not None:
        plan += always_full(full, start, end, blocked[full.pk], rng)
        by_node[full.node.hostname].remove(full)
    if (idle := special.get(LONG_IDLE[:2])) is not None and idle_from < end:
        plan += long_idle(idle, idle_from, end, blocked[idle.pk])
        blocked[idle.pk].append((idle_from, end, False))
    interactive = [g for g in gpus if g.index in INTERACTIVE.get(g.node.hostname, ()) and g is not idle]
    plan += notebooks(interactive, blocked, start, end, rng)
    for gpu in interactive:
        by_node[gpu.node.hostname].remove(gpu)
    for host, node_gpus in by_node.items():
        teams = NODE_TEAMS[host.rsplit("-", 1)[0]]
        parents = {g.pk: g for g in node_gpus if any(s.mig_parent_id == g.pk for s in slices)}
        plan += pack([g for g in node_gpus if g.pk not in parents], teams, start, end, blocked, rng)
        for slice_ in (s for s in slices if s.mig_parent_id in parents):
            plan += pack([slice_], MIG_TEAMS, start, end, {slice_.pk: blocked[slice_.mig_parent_id]}, rng,
                         busy_share=0.35, parent=parents[slice_.mig_parent_id])
    plan += unplaced(gpus, start, end, rng)
    return sorted(plan, key=lambda job: (job.start, job.host, job.gpus))


def _store_jobs(plan: list[PlannedJob], prefix: str) -> tuple[list[tuple[int, PlannedJob]], int]:
    """Jobs ``<prefix>1``, ``<prefix>2``, … in start order, their users, teams and projects from the demo's unix
    users (TeamIdentity), and their allocations. Returns the jobs stored, as (n, planned job), and the
    number of allocations."""
    users: dict[str, list] = {}
    for identity in TeamIdentity.objects.filter(kind=IdentityKind.UNIX_USER).select_related("team").order_by("name"):
        users.setdefault(identity.team.slug, []).append(identity)
    rng = random.Random(SEED + 1)
    jobs, allocations, stored = [], [], []
    for n, planned in enumerate(plan, start=1):
        if planned.team not in users:
            continue
        identity = rng.choice(users[planned.team])
        job = Job(
            source=JobSource.SLURM, external_id=f"{prefix}{n}", name=planned.name, user=identity.name,
            team=identity.team, project_id=identity.project_id, account=planned.team, partition=planned.pool,
            priority=rng.randrange(1000, 5000), gpu_count=planned.count.quantize(Decimal("0.001")),
            gpu_model_id=planned.model_id, state=planned.state, node_list=planned.host,
            submit_time=planned.start - rng.randrange(0, 180) * MINUTE, start_time=planned.start,
            end_time=planned.end,
        )
        jobs.append(job)
        stored.append((n, planned))
        for gpu_id in planned.gpus or [None]:
            allocations.append(Allocation(job=job, gpu_id=gpu_id, gpu_model_id=planned.model_id, share=planned.share,
                                          start=planned.start, end=planned.end))
    Job.objects.bulk_create(jobs, batch_size=2000)
    for allocation in allocations:
        allocation.job_id = allocation.job.pk
    Allocation.objects.bulk_create(allocations, batch_size=5000)
    return stored, len(allocations)
