"""A month of demo usage history (issue 6), so ``make demo`` opens on a usage report with something in
it: completed Slurm jobs on the demo GPUs, a few unplaced (sacct-like) and MIG-slice jobs, a node
outage, a sample gap, and a minute rollup for every physical GPU and minute, generated in SQL.

The window is the ``days`` business days before today up to ``now - 7 h`` (on the hour), so it never
overlaps the simulated agents' 6-hour backfill. Jobs are packed per node in Python (several hundred
rows, a fixed seed, never on a booked GPU or in a maintenance window; a job cut by the outage failed).
The minute and hour rollups are generated in SQL from the stored allocations (demo/telemetry.py), so
the telemetry agrees with the jobs: busy inside a job, one job in six idle for its first hours, nearly
idle when free, no rows during the outage, the sample gap or a maintenance window. Then the usage
aggregates (``usage_process``: the triggers marked everything inserted).
64 GPUs × 30 days (2.8 M minute rollups) load in about 25 s here, and the commit's foreign-key checks
take 10 s more.

Status history: load_demo creates the nodes, and so opens their first status period, at load time.
The history needs them up before that, so each node's history is made to start at the window's
start: the first period is backdated to it when it has the status the history ends with (up), and
closed periods are inserted before it otherwise (the outage node's "up, unreachable", the node that
load_demo put in maintenance). Nothing after the first period is touched, so the open period and
the order of the history stay as they were.

Idempotent: when the demo's jobs (Slurm ids ``demo-<n>``) exist, nothing is generated again; the
rollups are ``ON CONFLICT DO NOTHING`` and the status history only fills what precedes a node's first
period, so even a partial rerun adds nothing twice. Collection state is left to the collector.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
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
    JobState,
    NodeStatusPeriod,
    TeamIdentity,
)
from core.timeutils import business_day_bounds, business_today
from core.units import WHOLE_GPU_SHARE
from demo.telemetry import insert_hours, insert_minutes

HISTORY_LAG = timedelta(hours=7)  # the agents backfill the last 6 hours
ID_PREFIX = "demo-"
SEED = 6
MINUTE, HOUR = timedelta(minutes=1), timedelta(hours=1)
# hostname prefix → (team slug, weight) of the jobs on its nodes
NODE_TEAMS = {
    "gpu-h200": (("llm", 7), ("vision", 3)),
    "gpu-h100": (("vision", 6), ("llm", 2), ("inference", 2)),
    "gpu-l40s": (("inference", 1),),
}
# team → (share of a GPU's time in jobs it aims at, GPU counts, hours (min, mode, max), job names)
TEAM_JOBS = {
    "llm": (0.78, (8, 8, 4, 2), (6, 12, 48), ("pretrain-7b", "pretrain-13b", "dpo", "reward-model", "sft")),
    "vision": (0.70, (1, 2, 4, 4, 8), (2, 6, 30), ("detr-finetune", "yolo-sweep", "video-diffusion", "vit-pretrain")),
    "inference": (0.62, (1, 1, 2, 4), (2, 4, 16), ("serve-llama-70b", "eval-suite", "batch-embed", "load-test")),
}
# (host, days ago at most, local start hour, hours)
OUTAGE = ("gpu-h100-02", 5, 10, 3)
SAMPLE_GAP = ("gpu-h200-03", 9, 15, 2)
MIG_TEAMS = (("inference", 3), ("vision", 1))


@dataclass
class PlannedJob:
    team: str
    name: str
    gpus: list[int]  # empty: unplaced
    host: str
    pool: str
    model_id: int
    start: datetime
    end: datetime
    state: str = JobState.COMPLETED
    count: Decimal = Decimal(0)
    share: int = WHOLE_GPU_SHARE  # per GPU; unplaced: all of them


def history_window(*, days: int, now: datetime) -> tuple[datetime, datetime]:
    """``[start, end)`` of the history: local midnight ``days`` business days ago up to ``now - 7 h``, on the hour."""
    start = business_day_bounds(business_today(now=now) - timedelta(days=days))[0]
    end = (now.astimezone(UTC) - HISTORY_LAG).replace(minute=0, second=0, microsecond=0)
    return start, max(start, end)


def incident_range(spec: tuple, *, days: int, now: datetime) -> tuple[str, datetime, datetime]:
    """(host, start, end) of :data:`OUTAGE` or :data:`SAMPLE_GAP` in a history of ``days`` days."""
    host, ago, hour, hours = spec
    start = business_day_bounds(business_today(now=now) - timedelta(days=min(ago, days)))[0] + hour * HOUR
    return host, start, start + hours * HOUR


@transaction.atomic
def load_demo_history(*, days: int = 30, now: datetime | None = None) -> dict:
    """Generate the history (see the module docstring). Returns counts and the seconds each step took."""
    now = now or timezone.now()
    start, end = history_window(days=days, now=now)
    result = {"skipped": True, "jobs": 0, "allocations": 0, "status_periods": 0, "minute_rollups": 0,
              "hour_rollups": 0, "seconds": {}}
    if days <= 0 or end <= start or Job.objects.filter(source=JobSource.SLURM, external_id__startswith=ID_PREFIX).exists():
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
    outage = incident_range(OUTAGE, days=days, now=now)
    outage = outage if start <= outage[1] and outage[2] <= end else None
    result["status_periods"] = _status_history({g.node for g in gpus}, start, outage)
    seconds["status"], clock = time.perf_counter() - clock, time.perf_counter()
    holds = _holds([g.pk for g in gpus], start, end)
    slices = list(Gpu.objects.filter(mig_parent__in=gpus).select_related("node", "model").order_by("pk"))
    plan = _plan(gpus, slices, start, end, holds, outage, random.Random(SEED))
    result["jobs"], result["allocations"] = _store_jobs(plan)
    seconds["jobs"], clock = time.perf_counter() - clock, time.perf_counter()
    gap = incident_range(SAMPLE_GAP, days=days, now=now)
    holes = [(g.pk, lo, hi) for g in gpus for host, lo, hi in filter(None, (outage, gap))
             if host == g.node.hostname and hi <= end]
    holes += [(gpu_id, lo, hi) for gpu_id, kind, lo, hi in holds if kind == HoldKind.MAINTENANCE]
    result["minute_rollups"] = insert_minutes(gpus, mig={s.mig_parent_id for s in slices}, start=start, end=end,
                                              holes=holes, job_prefix=ID_PREFIX)
    seconds["minute_rollups"], clock = time.perf_counter() - clock, time.perf_counter()
    result["hour_rollups"] = insert_hours([g.pk for g in gpus], start=start, end=end)
    seconds["hour_rollups"], clock = time.perf_counter() - clock, time.perf_counter()
    result["usage"] = usage_process(now=now)
    seconds["usage"] = time.perf_counter() - clock
    return result


# --- Status history ---------------------------------------------------------------------------------------

def _status_history(nodes, start: datetime, outage: tuple | None) -> int:
    """Make each node's history start at ``start`` (see the module docstring). Returns periods inserted."""
    made = []
    for node in sorted(nodes, key=lambda n: n.hostname):
        first = NodeStatusPeriod.objects.filter(node=node).order_by("started_at").first()
        if first is None or first.started_at <= start:
            continue
        segments = [(NodeStatus.UP, start, first.started_at, "demo history")]
        if outage and outage[0] == node.hostname and outage[2] <= first.started_at:
            _host, lo, hi = outage
            segments = [(NodeStatus.UP, start, lo, "demo history"),
                        (NodeStatus.UNREACHABLE, lo, hi, "demo history: the agent did not answer"),
                        (NodeStatus.UP, hi, first.started_at, "demo history")]
        if segments[-1][0] == first.status:
            NodeStatusPeriod.objects.filter(pk=first.pk).update(started_at=segments.pop()[1])
        made += [NodeStatusPeriod(node=node, status=status, started_at=lo, ended_at=hi, reason=reason)
                 for status, lo, hi, reason in segments if hi > lo]
    NodeStatusPeriod.objects.bulk_create(made)
    return len(made)


# --- Jobs -------------------------------------------------------------------------------------------------

def _holds(gpu_ids: list[int], start: datetime, end: datetime) -> list[tuple]:
    """(GPU, kind, lo, hi) of the bookings and maintenance windows in the window: no demo job goes there."""
    rows = GpuHold.objects.filter(gpu_id__in=gpu_ids, active=True, during__overlap=(start, end)).values_list(
        "gpu_id", "kind", "during")
    return [(gpu_id, kind, max(during.lower, start), min(during.upper, end)) for gpu_id, kind, during in rows]


def _plan(gpus: list[Gpu], slices: list[Gpu], start: datetime, end: datetime, holds: list[tuple], outage,
          rng: random.Random) -> list[PlannedJob]:
    """Every job of the history: per node, whole-GPU jobs, MIG-slice jobs on its slices, then the unplaced ones."""
    blocked: dict[int, list[tuple]] = {g.pk: [] for g in gpus}
    for gpu_id, _kind, lo, hi in holds:
        blocked[gpu_id].append((lo, hi, False))
    by_node: dict[str, list[Gpu]] = {}
    for gpu in gpus:
        by_node.setdefault(gpu.node.hostname, []).append(gpu)
        if outage and outage[0] == gpu.node.hostname:
            blocked[gpu.pk].append((outage[1], outage[2], True))
    plan = []
    for host, node_gpus in by_node.items():
        teams = NODE_TEAMS[host.rsplit("-", 1)[0]]
        parents = {g.pk: g for g in node_gpus if any(s.mig_parent_id == g.pk for s in slices)}
        plan += _pack([g for g in node_gpus if g.pk not in parents], teams, start, end, blocked, rng)
        for slice_ in (s for s in slices if s.mig_parent_id in parents):
            plan += _pack([slice_], MIG_TEAMS, start, end, {slice_.pk: blocked[slice_.mig_parent_id]}, rng,
                          busy_share=0.35, parent=parents[slice_.mig_parent_id])
    plan += _unplaced(gpus, start, end, rng)
    return sorted(plan, key=lambda job: (job.start, job.host, job.gpus))


def _pack(gpus, teams, start, end, blocked, rng, *, busy_share=None, parent=None) -> list[PlannedJob]:
    """Jobs on ``gpus`` (one node) from ``start`` to ``end``: each on the GPUs free soonest, followed by a
    pause sized so that the team's jobs fill about its share of the time; never on a blocked range."""
    free = {g.pk: start + rng.randrange(0, 360) * MINUTE for g in gpus}
    out = []
    while min(free.values()) < end - HOUR:
        team = rng.choices([t for t, _w in teams], weights=[w for _t, w in teams])[0]
        share, sizes, (low, mode, high), names = TEAM_JOBS[team]
        share = busy_share or share
        chosen = sorted(gpus, key=lambda g: (free[g.pk], g.pk))[:min(rng.choice(sizes), len(gpus))]
        begin = max(free[g.pk] for g in chosen)
        finish = min(begin + round(rng.triangular(low, high, mode) * 60) * MINUTE, end)
        state = rng.choices([JobState.COMPLETED, JobState.FAILED, JobState.PREEMPTED, JobState.CANCELLED],
                            weights=[88, 5, 4, 3])[0]
        for lo, hi, is_outage in sorted(b for g in chosen for b in blocked[g.pk]):
            if hi <= begin or lo >= finish:
                continue
            if lo <= begin:
                begin = finish = hi  # starts inside a blocked range: try again after it
                break
            finish, state = lo, (JobState.FAILED if is_outage else state)
        if finish - begin >= HOUR:
            model = (parent or chosen[0]).model
            out.append(PlannedJob(
                team=team, name=rng.choice(names), gpus=[g.pk for g in chosen], host=chosen[0].node.hostname,
                pool=chosen[0].node.pool, model_id=model.pk, start=begin, end=finish, state=state,
                count=Decimal(sum(g.share for g in chosen)) / WHOLE_GPU_SHARE, share=chosen[0].share,
            ))
            pause = (finish - begin) * (1 - share) / share * rng.uniform(0.3, 1.3)
        else:
            pause = timedelta(0)
        for gpu in chosen:
            free[gpu.pk] = max(free[gpu.pk], finish, begin) + pause // MINUTE * MINUTE
    return out


def _unplaced(gpus, start, end, rng) -> list[PlannedJob]:
    """sacct-like jobs: a GPU count and model, no node (about one every three days)."""
    models = sorted({g.model_id for g in gpus})
    out = []
    span_min = int((end - start) / MINUTE)
    for _n in range(max(2, span_min // (3 * 1440))):
        team = rng.choice(list(TEAM_JOBS))
        begin = start + rng.randrange(0, max(1, span_min - 120)) * MINUTE
        count = rng.choice((1, 2, 4))
        out.append(PlannedJob(
            team=team, name=rng.choice(TEAM_JOBS[team][3]), gpus=[], host="", pool="", model_id=rng.choice(models),
            start=begin, end=min(end, begin + rng.randrange(120, 24 * 60) * MINUTE), count=Decimal(count),
            share=count * WHOLE_GPU_SHARE,
        ))
    return out


def _store_jobs(plan: list[PlannedJob]) -> tuple[int, int]:
    """Jobs ``demo-1``, ``demo-2``, … in start order, their users, teams and projects from the demo's unix
    users (TeamIdentity), and their allocations."""
    users: dict[str, list] = {}
    for identity in TeamIdentity.objects.filter(kind=IdentityKind.UNIX_USER).select_related("team").order_by("name"):
        users.setdefault(identity.team.slug, []).append(identity)
    rng = random.Random(SEED + 1)
    jobs, allocations = [], []
    for n, planned in enumerate(plan, start=1):
        if planned.team not in users:
            continue
        identity = rng.choice(users[planned.team])
        job = Job(
            source=JobSource.SLURM, external_id=f"{ID_PREFIX}{n}", name=planned.name, user=identity.name,
            team=identity.team, project_id=identity.project_id, account=planned.team, partition=planned.pool,
            priority=rng.randrange(1000, 5000), gpu_count=planned.count.quantize(Decimal("0.001")),
            gpu_model_id=planned.model_id, state=planned.state, node_list=planned.host,
            submit_time=planned.start - rng.randrange(0, 180) * MINUTE, start_time=planned.start,
            end_time=planned.end,
        )
        jobs.append(job)
        for gpu_id in planned.gpus or [None]:
            allocations.append(Allocation(job=job, gpu_id=gpu_id, gpu_model_id=planned.model_id, share=planned.share,
                                          start=planned.start, end=planned.end))
    Job.objects.bulk_create(jobs, batch_size=2000)
    for allocation in allocations:
        allocation.job_id = allocation.job.pk
    Allocation.objects.bulk_create(allocations, batch_size=5000)
    return len(jobs), len(allocations)
