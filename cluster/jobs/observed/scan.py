"""The observed-usage scan (the package docstring has the rules): one run under the lock, then the writes
that merge presence into known jobs' observed allocations and into observed jobs, completing quiet
ones and attributing newly mapped users.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from cluster.jobs.observed.presence import (
    GpuFacts,
    Piece,
    attribute_pieces,
    gpu_facts,
    read_pieces,
    remember_scanned,
    scan_from,
    take_back_from_observed,
)
from cluster.jobs.observed.ranges import components, merge_ranges
from cluster.jobs.services import JobInput, Outcome, job_upsert
from cluster.models import (
    Allocation,
    AllocationOrigin,
    GpuModel,
    IdentityKind,
    Job,
    JobSource,
    JobState,
    TeamIdentity,
)
from core.locks import advisory_lock

log = logging.getLogger(__name__)

LOCK_NAME = "cluster.observed_scan"
NODE_LIST_MAX = Job._meta.get_field("node_list").max_length  # agents' host names, clipped to the column


def observed_scan(*, start: datetime | None = None, end: datetime | None = None) -> dict:
    """Turn the processes in stored samples into observed allocations and jobs (module docstring).

    Without ``start``/``end`` each node is read from where the last scan left it; with them, every
    GPU's samples with ``start < ts <= end``. Returns counts; ``{"skipped": True}`` when another scan
    holds the lock."""
    gap = timedelta(seconds=settings.OBSERVED_GAP_S)
    with advisory_lock(LOCK_NAME) as locked:
        if not locked:
            return {"skipped": True}
        gpus = gpu_facts()
        pieces = read_pieces(scan_from(gpus, start), end, gpus, gap)
        pieces += take_back_from_observed(gap)
        known, observed = attribute_pieces(pieces, gap)
        result = {"pieces": len(pieces)}
        result["known_allocations_written"] = _apply_known(known, gpus, gap)
        touched, result["observed_jobs_written"], result["observed_allocations_written"] = _apply_observed(observed, gpus, gap)
        result["completed"] = _complete_quiet_jobs(gpus, gap, skip=touched)
        result["attributed"] = _attribute_unmapped()
        if start is None and end is None:
            remember_scanned(gpus)
    log.info("observed scan: %s", result)
    return result



def _apply_known(known: dict, gpus: dict[int, GpuFacts], gap: timedelta) -> int:
    """Merge presence into the observed allocations of known jobs; returns rows written."""
    if not known:
        return 0
    have = defaultdict(list)
    existing = Allocation.objects.filter(
        job_id__in={job_id for job_id, _g in known}, origin=AllocationOrigin.OBSERVED
    ).order_by("start", "pk")
    for allocation in existing:
        have[(allocation.job_id, allocation.gpu_id)].append(allocation)
    written = 0
    for (job_id, gpu_id), ranges in sorted(known.items()):
        current = have[(job_id, gpu_id)]
        wanted = merge_ranges([(a.start, a.end) for a in current] + ranges, gap)
        written += _sync_allocations(job_id, current, [(gpu_id, s, e) for s, e in wanted], gpus)
    return written


def _apply_observed(observed: dict[str, list[Piece]], gpus: dict[int, GpuFacts], gap: timedelta):
    """Merge presence into observed jobs, one per run of each key; returns (job ids touched, jobs
    written, allocation rows written)."""
    if not observed:
        return set(), 0, 0
    every = [p for pieces in observed.values() for p in pieces]
    lo, hi = min(p.start for p in every) - gap, max(p.end for p in every) + gap
    jobs = defaultdict(list)
    candidates = Job.objects.filter(source=JobSource.OBSERVED, external_id__in=list(observed), start_time__lte=hi).filter(
        Q(end_time__isnull=True) | Q(end_time__gte=lo)
    ).select_related("team", "project")
    by_id = {job.pk: job for job in candidates}
    allocations = defaultdict(list)
    for allocation in Allocation.objects.filter(job_id__in=list(by_id)).order_by("start", "pk"):
        allocations[allocation.job_id].append(allocation)
    for job in by_id.values():
        jobs[job.external_id].append(job)
    users = {p.user for p in every} | {job.user for job in by_id.values()}
    identities = {
        i.name: i for i in TeamIdentity.objects.filter(kind=IdentityKind.UNIX_USER, name__in=users).select_related(
            "team", "project"
        )
    }
    models = {m.pk: m for m in GpuModel.objects.filter(pk__in={gpus[p.gpu_id].model_id for p in every})}
    touched, jobs_written, rows_written = set(), 0, 0
    for key in sorted(observed):
        items = [(a.start, a.end, a.gpu_id, job, None) for job in jobs[key] for a in allocations[job.pk]]
        items += [(p.start, p.end, p.gpu_id, None, p) for p in observed[key]]
        for group in _runs_of(items, gap):
            if not any(piece for *_r, piece in group):
                continue  # nothing new for this run
            members = sorted({job.pk: job for *_r, job, _p in group if job}.values(), key=lambda j: (j.start_time, j.pk))
            keeper, extra = (members[0], members[1:]) if members else (None, [])
            if extra:
                Job.objects.filter(pk__in=[j.pk for j in extra]).delete()
            job, changed = _upsert_run(key, keeper, group, gpus, identities, models, gap)
            jobs_written += changed
            touched.add(job.pk)
            by_gpu = defaultdict(list)
            for start, end, gpu_id, *_rest in group:
                by_gpu[gpu_id].append((start, end))
            wanted = [(gpu_id, s, e) for gpu_id, ranges in by_gpu.items() for s, e in merge_ranges(ranges, gap)]
            current = [] if keeper is None else allocations[keeper.pk]
            rows_written += _sync_allocations(job.pk, current, wanted, gpus)
    return touched, jobs_written, rows_written


def _runs_of(items: list[tuple], gap: timedelta) -> list[list[tuple]]:
    """The runs of one key: ``components`` of its ranges, joined where one job's allocations fall
    into several (possible only after ``OBSERVED_GAP_S`` was lowered), so a row stays one run."""
    runs: list[list[tuple]] = []
    run_of_job: dict[int, int] = {}
    for group in components(items, gap):
        joined = sorted({run_of_job[item[3].pk] for item in group if item[3] and item[3].pk in run_of_job})
        if not joined:
            runs.append(group)
            target = len(runs) - 1
        else:
            target = joined[0]
            for other in joined[1:]:
                runs[target] += runs[other]
                runs[other] = []
            runs[target] += group
        for item in runs[target]:
            if item[3]:
                run_of_job[item[3].pk] = target
    return [run for run in runs if run]


def _upsert_run(key, keeper, group, gpus, identities, models, gap) -> tuple[Job, bool]:
    """Write the job row of one run of an observed key (through ``job_upsert``)."""
    start, last_seen = min(i[0] for i in group), max(i[1] for i in group)
    gpu_ids = {i[2] for i in group}
    users = {p.user for *_r, p in group if p and p.user} | ({keeper.user} if keeper and keeper.user else set())
    user = min(users) if users else ""
    identity = identities.get(user)
    if identity is not None:
        team, project = identity.team, identity.project
        if project is not None and project.team_id != team.pk:
            project = None  # a mapping naming another team's project: the team still holds
    else:  # unmapped: keep what the row has (a team an admin set), or none
        team, project = (keeper.team, keeper.project) if keeper else (None, None)
    newest = [gpus[g].newest_ts for g in gpu_ids if gpus[g].newest_ts is not None]
    running = not newest or max(newest) - last_seen <= gap
    model_ids = {gpus[g].model_id for g in gpu_ids}
    if keeper is not None and keeper.start_time != start:
        Job.objects.filter(pk=keeper.pk).update(start_time=start)  # the run's key moves to its new first sighting
    job, outcome = job_upsert(JobInput(
        source=JobSource.OBSERVED, external_id=key, start_time=start, team=team, project=project, user=user,
        gpu_model=models.get(next(iter(model_ids))) if len(model_ids) == 1 else None,
        state=JobState.RUNNING if running else JobState.COMPLETED, end_time=None if running else last_seen,
        node_list=",".join(sorted({gpus[g].hostname for g in gpu_ids}))[:NODE_LIST_MAX],
    ))
    return job, outcome != Outcome.UNCHANGED or (keeper is not None and keeper.start_time != start)


def _sync_allocations(job_id: int, current: list[Allocation], wanted: list[tuple], gpus: dict[int, GpuFacts]) -> int:
    """Make a job's observed allocations ``current`` equal ``wanted`` ``(gpu id, start, end)``,
    keeping rows that already match; returns rows written."""
    spare = {}
    for allocation in current:
        spare.setdefault((allocation.gpu_id, allocation.start, allocation.end, allocation.share), []).append(allocation)
    missing = []
    for gpu_id, start, end in sorted(wanted):
        key = (gpu_id, start, end, gpus[gpu_id].share)
        if spare.get(key):
            spare[key].pop()
        else:
            missing.append(key)
    reusable = sorted((a for rows in spare.values() for a in rows), key=lambda a: a.pk)
    for gpu_id, start, end, share in missing:
        if reusable:
            allocation = reusable.pop(0)
            allocation.gpu_id, allocation.start, allocation.end, allocation.share = gpu_id, start, end, share
            allocation.save(update_fields=["gpu", "start", "end", "share"])
        else:
            Allocation.objects.create(
                job_id=job_id, gpu_id=gpu_id, share=share, start=start, end=end, origin=AllocationOrigin.OBSERVED
            )
    if reusable:
        Allocation.objects.filter(pk__in=[a.pk for a in reusable]).delete()
    return len(missing) + len(reusable)


def _complete_quiet_jobs(gpus: dict[int, GpuFacts], gap: timedelta, *, skip: set[int]) -> int:
    """Complete the running observed jobs whose GPUs reported past the gap without them."""
    last_seen, newest = {}, defaultdict(list)
    rows = Allocation.objects.filter(job__source=JobSource.OBSERVED, job__state=JobState.RUNNING).exclude(
        job_id__in=skip
    ).values_list("job_id", "gpu_id", "end")
    for job_id, gpu_id, end in rows:
        last_seen[job_id] = max(end, last_seen.get(job_id, end))
        if gpus[gpu_id].newest_ts is not None:
            newest[job_id].append(gpus[gpu_id].newest_ts)
    done = 0
    for job in Job.objects.filter(pk__in=[j for j in last_seen if newest[j] and max(newest[j]) - last_seen[j] > gap]):
        job.state, job.end_time = JobState.COMPLETED, last_seen[job.pk]
        job.save(update_fields=["state", "end_time", "updated_at"])
        done += 1
    return done


def _attribute_unmapped() -> int:
    """Give team-less observed jobs the team (and project) their user is now mapped to."""
    identity = TeamIdentity.objects.filter(kind=IdentityKind.UNIX_USER, name=OuterRef("user"))
    return Job.objects.filter(source=JobSource.OBSERVED, team__isnull=True).filter(Exists(identity)).update(
        team=Subquery(identity.values("team")[:1]), project=Subquery(identity.values("project")[:1]),
        updated_at=timezone.now(),
    )


# --- Reading -------------------------------------------------------------------------------------------


def counted_allocations(queryset: QuerySet | None = None) -> QuerySet:
    """The allocations that count a job's usage, once (see ``AllocationQuerySet.counted``)."""
    return (Allocation.objects.all() if queryset is None else queryset).counted()
