"""Observed usage: the processes agents see on GPUs become jobs and observed allocations (DESIGN.md §3, §4).

A periodic scan (``observed_scan``, beat task ``cluster.tasks.observed_scan``) reads the ``processes``
of stored samples and writes what they show. What it writes is a function of the stored samples, jobs
and team identities, merged into what earlier scans wrote by unions that give the same rows however
the samples are cut into scans: running it twice, or after a crash, changes nothing.

Presence
    A record covers ``[ts - interval_s, ts]``; a process listed in it was present over that range. Per
    GPU, the records listing one *identity* (its ``job_ref``; without one, its unix user) make ranges
    of presence; two ranges at most ``OBSERVED_GAP_S`` apart (a missed sample or two, a job step
    ending and the next starting) are one range. A process on a MIG instance's record belongs to that
    instance. One on a whole GPU's record that names a MIG instance (``gi_id``) belongs to the
    parent's only instance when it has one; otherwise to the parent: ``Gpu`` does not store its
    instances' ``gi_id``/``ci_id`` yet (the agents' nvml and sim backends list such processes on the
    instance's own record, so this is rare).

Known jobs
    ``job_<id>`` names the Slurm job ``<id>`` (or an array task ``<id>_<n>``), ``k8s-pod:<uid>`` the
    Kubernetes job ``<uid>``; a run of that job matches presence that overlaps its
    ``[start - gap, end + gap]`` (a running job has no end). The matched presence, clipped to the
    run's own ``[start, end]`` (a sample interval reaches a little before the start), becomes
    ``Allocation(origin=observed)`` rows of that job on that GPU with the GPU's share, merged with the
    ones it had: one row per range. The job's own fields are the scheduler's and are not changed.

Observed jobs
    Presence that matches no known run becomes a job with ``source=observed``: keyed by its
    ``job_ref`` (so one unknown Slurm job on eight GPUs, or on two nodes, is one job with eight
    allocations), or without one by ``<hostname>/<user>``. All the presence of one key, on all its
    GPUs, whose ranges are at most the gap apart is one *run*: one ``Job`` row whose start is the
    run's first sighting; a key seen again after a longer pause is a new run (a new row, like a
    requeued job). Late records that bridge two runs merge them into the earlier row. Team and project
    come from ``TeamIdentity(kind=unix_user, name=<user>)`` (the lexically first user when a run has
    several); unmapped users leave the team empty (the database allows that for observed jobs only),
    and a mapping added later fills it in. Such a job is ``running`` until its GPUs report samples
    more than the gap past its last sighting, then ``completed`` with ``end_time`` = last sighting.
    It requests nothing (``gpu_count`` 0: its allocations are what it held) and has no submit time.

    An observed job keyed ``job_<id>``/``k8s-pod:<uid>`` whose presence later turns out to belong to
    a known run (the scheduler's record arrived after the processes, e.g. a nightly sacct import) is
    taken apart by the next scan after that record is written (within ``OBSERVED_LOOKBACK_S`` of it)
    and its presence handed to the known job, so no job-time is held by two jobs.

Allocation ends
    An observed allocation always has an end: the last moment it was seen (a running job's grows with
    each scan). Usage is counted for what was observed, never up to "now".

Counting (for accounting): a job is counted once, by :func:`counted_allocations`: its placed
    scheduler allocations if it has any, else its observed ones, else its unplaced one. The unplaced
    row is kept rather than replaced: the scheduler's way in (``job_upsert``) would recreate it, and it
    stays the job's record of what was requested.

What is scanned
    ``ObservedScanState`` keeps, per node, the newest sample time the last scan read; the next scan
    starts ``OBSERVED_OVERLAP_S`` before it (a node never scanned: ``OBSERVED_LOOKBACK_S`` before its
    newest sample). A node's samples arrive in time order, so this reads every new record; an explicit
    ``start``/``end`` rescans any window (after importing history) and moves no watermark.

Concurrency: one scan at a time (a transaction-scoped advisory lock; a second scan meanwhile does
nothing), and every write in that one transaction.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from cluster.jobs.observed_ranges import DIGITS, components, merge_ranges, parse_job_ref, split_by_runs
from cluster.jobs.services import JobInput, Outcome, job_upsert
from cluster.models import (
    Allocation,
    AllocationOrigin,
    GpuModel,
    IdentityKind,
    Job,
    JobSource,
    JobState,
    ObservedScanState,
    TeamIdentity,
)
from core.locks import advisory_lock

log = logging.getLogger(__name__)

LOCK_NAME = "cluster.observed_scan"
# Agents report free text: clip it to the Job columns so one odd process cannot fail every scan.
EXTERNAL_ID_MAX = Job._meta.get_field("external_id").max_length
USER_MAX = Job._meta.get_field("user").max_length
NODE_LIST_MAX = Job._meta.get_field("node_list").max_length



@dataclass(frozen=True)
class Piece:
    """A range over which a process identity was seen on a GPU (or MIG instance)."""

    gpu_id: int
    start: datetime
    end: datetime
    ref: str | None
    user: str
    hostname: str

    @property
    def observed_key(self) -> str:
        """The external id of the observed job this presence belongs to when no known job claims it."""
        return (self.ref or f"{self.hostname}/{self.user or '-'}")[:EXTERNAL_ID_MAX]


@dataclass(frozen=True)
class GpuFacts:
    node_id: int
    hostname: str
    parent_id: int | None
    share: int
    model_id: int
    active: bool
    newest_ts: datetime | None  # the GPU's newest stored sample


# --- Pure functions ------------------------------------------------------------------------------------


def observed_scan(*, start: datetime | None = None, end: datetime | None = None) -> dict:
    """Turn the processes in stored samples into observed allocations and jobs (module docstring).

    Without ``start``/``end`` each node is read from where the last scan left it; with them, every
    GPU's samples with ``start < ts <= end``. Returns counts; ``{"skipped": True}`` when another scan
    holds the lock."""
    gap = timedelta(seconds=settings.OBSERVED_GAP_S)
    with advisory_lock(LOCK_NAME) as locked:
        if not locked:
            return {"skipped": True}
        gpus = _gpu_facts()
        pieces = _read_pieces(_scan_from(gpus, start), end, gpus, gap)
        pieces += _take_back_from_observed(gap)
        known, observed = _attribute_pieces(pieces, gap)
        result = {"pieces": len(pieces)}
        result["known_allocations_written"] = _apply_known(known, gpus, gap)
        touched, result["observed_jobs_written"], result["observed_allocations_written"] = _apply_observed(observed, gpus, gap)
        result["completed"] = _complete_quiet_jobs(gpus, gap, skip=touched)
        result["attributed"] = _attribute_unmapped()
        if start is None and end is None:
            _remember_scanned(gpus)
    log.info("observed scan: %s", result)
    return result


def _gpu_facts() -> dict[int, GpuFacts]:
    sql = """
        SELECT g.id, g.node_id, n.hostname, g.mig_parent_id, g.share, g.model_id, g.status = 'active',
               (SELECT max(s.ts) FROM cluster_sample s WHERE s.gpu_id = g.id)
        FROM cluster_gpu g JOIN cluster_node n ON n.id = g.node_id
    """
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return {row[0]: GpuFacts(*row[1:]) for row in cursor.fetchall()}


def _scan_from(gpus: dict[int, GpuFacts], start: datetime | None) -> dict[int, datetime]:
    """Per GPU, the sample time after which this scan reads: where the last scan left its node
    (``ObservedScanState``) less ``OBSERVED_OVERLAP_S``, or, for a node never scanned, the last
    ``OBSERVED_LOOKBACK_S`` before its newest sample. A node's samples arrive in time order (the agent's
    spool), so this reads every new one; reading too much costs time only: merging is idempotent."""
    if start is not None:
        return {gpu_id: start for gpu_id, facts in gpus.items() if facts.newest_ts is not None}
    lookback = timedelta(seconds=settings.OBSERVED_LOOKBACK_S)
    overlap = timedelta(seconds=settings.OBSERVED_OVERLAP_S)
    node_newest = _node_newest(gpus)
    scanned = dict(ObservedScanState.objects.filter(node_id__in=node_newest).values_list("node_id", "scanned_to"))
    node_from = {
        node_id: scanned[node_id] - overlap if node_id in scanned else newest - lookback
        for node_id, newest in node_newest.items()
    }
    return {gpu_id: node_from[f.node_id] for gpu_id, f in gpus.items() if f.node_id in node_from}


def _node_newest(gpus: dict[int, GpuFacts]) -> dict[int, datetime]:
    newest: dict[int, datetime] = {}
    for facts in gpus.values():
        if facts.newest_ts is not None:
            newest[facts.node_id] = max(facts.newest_ts, newest.get(facts.node_id, facts.newest_ts))
    return newest


def _remember_scanned(gpus: dict[int, GpuFacts]) -> None:
    for node_id, newest in _node_newest(gpus).items():
        ObservedScanState.objects.update_or_create(node_id=node_id, defaults={"scanned_to": newest})


# One row per (GPU, identity, MIG ids, range of presence): records are cut into islands where the gap
# to everything earlier of the same identity exceeds the threshold. Process entries are read
# defensively: ingest checks only that ``processes`` is a list.
PIECES_SQL = """
WITH bounds AS (
    SELECT * FROM unnest(%(gpu_ids)s::bigint[], %(froms)s::timestamptz[]) AS b(gpu_id, after)
),
seen AS (
    SELECT s.gpu_id, s.ts - make_interval(secs => s.interval_s) AS st, s.ts AS en,
           CASE WHEN jsonb_typeof(e.p->'job_ref') = 'string' AND e.p->>'job_ref' <> '' THEN e.p->>'job_ref' END AS ref,
           CASE WHEN jsonb_typeof(e.p->'user') IN ('string', 'number') THEN e.p->>'user' ELSE '' END AS who,
           CASE WHEN jsonb_typeof(e.p->'gi_id') = 'number' AND (e.p->>'gi_id')::numeric BETWEEN 0 AND 65535
                THEN (e.p->>'gi_id')::numeric::int ELSE -1 END AS gi,
           CASE WHEN jsonb_typeof(e.p->'ci_id') = 'number' AND (e.p->>'ci_id')::numeric BETWEEN 0 AND 65535
                THEN (e.p->>'ci_id')::numeric::int ELSE -1 END AS ci
    FROM bounds b
    CROSS JOIN LATERAL (  -- an index range scan of the (gpu_id, ts) key per GPU
        SELECT s.gpu_id, s.ts, s.interval_s, s.processes FROM cluster_sample s
        WHERE s.gpu_id = b.gpu_id AND s.ts > b.after AND (%(until)s::timestamptz IS NULL OR s.ts <= %(until)s)
          AND s.processes IS NOT NULL
        OFFSET 0
    ) s
    CROSS JOIN LATERAL jsonb_array_elements(
        CASE WHEN jsonb_typeof(s.processes) = 'array' THEN s.processes ELSE '[]'::jsonb END) AS e(p)
    WHERE jsonb_typeof(e.p) = 'object'
),
keyed AS (
    SELECT gpu_id, st, en, ref, CASE WHEN ref IS NULL THEN who ELSE '' END AS owner, gi, ci,
           min(NULLIF(who, '')) AS who
    FROM seen GROUP BY 1, 2, 3, 4, 5, 6, 7
),
flagged AS (
    SELECT *, CASE WHEN st - max(en) OVER earlier <= %(gap)s THEN 0 ELSE 1 END AS begins
    FROM keyed
    WINDOW earlier AS (PARTITION BY gpu_id, ref, owner, gi, ci ORDER BY st, en
                       ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING)
),
numbered AS (
    SELECT *, sum(begins) OVER (PARTITION BY gpu_id, ref, owner, gi, ci ORDER BY st, en ROWS UNBOUNDED PRECEDING)
              AS island
    FROM flagged
)
SELECT gpu_id, ref, gi, ci, min(st), max(en), coalesce(min(who), '')
FROM numbered GROUP BY gpu_id, ref, owner, gi, ci, island
"""


def _read_pieces(
    froms: dict[int, datetime], until: datetime | None, gpus: dict[int, GpuFacts], gap: timedelta
) -> list[Piece]:
    if not froms:
        return []
    ids = sorted(froms)
    with connection.cursor() as cursor:
        cursor.execute(PIECES_SQL, {"gpu_ids": ids, "froms": [froms[i] for i in ids], "until": until, "gap": gap})
        rows = cursor.fetchall()
    instances = defaultdict(list)
    for gpu_id, facts in gpus.items():
        if facts.parent_id is not None and facts.active:
            instances[facts.parent_id].append(gpu_id)
    pieces = []
    for gpu_id, ref, gi, _ci, start, end, user in rows:
        target = gpu_id
        if gi >= 0 and gpus[gpu_id].parent_id is None and len(instances[gpu_id]) == 1:
            target = instances[gpu_id][0]
        pieces.append(Piece(target, start, end, ref, user[:USER_MAX], gpus[target].hostname))
    return pieces


# Observed jobs named by a job_ref whose presence overlaps a run of a known job written since
# ``since``: the same matching rule as _known_runs and split_by_runs, so a job taken apart here is
# never rebuilt as an observed job. Driven by the few recent known jobs, with index lookups of the
# observed ones by (source, external id).
TAKE_BACK_SQL = """
WITH recent AS (
    SELECT start_time, end_time,
           CASE WHEN source = 'slurm' THEN 'job_' || split_part(external_id, '_', 1)
                ELSE 'k8s-pod:' || external_id END AS ref
    FROM cluster_job
    WHERE updated_at >= %(since)s AND start_time IS NOT NULL
      AND ((source = 'slurm' AND external_id ~ '^[0-9]+(_[0-9]+)?$') OR (source = 'kubernetes' AND external_id <> ''))
)
SELECT DISTINCT o.id
FROM recent k
JOIN cluster_job o ON o.source = 'observed' AND o.external_id = k.ref
JOIN cluster_allocation a ON a.job_id = o.id
WHERE a.start < coalesce(k.end_time + %(gap)s, 'infinity') AND a."end" > k.start_time - %(gap)s
"""


def _take_back_from_observed(gap: timedelta) -> list[Piece]:
    """Delete the observed jobs that a known run now claims (see the module docstring) and return
    their presence, to be attributed afresh.

    Only known jobs written within ``OBSERVED_LOOKBACK_S`` are considered: a job claims presence when
    it is recorded or its times change, and scans run every minute."""
    since = timezone.now() - timedelta(seconds=settings.OBSERVED_LOOKBACK_S)
    with connection.cursor() as cursor:
        cursor.execute(TAKE_BACK_SQL, {"gap": gap, "since": since})
        job_ids = [row[0] for row in cursor.fetchall()]
    if not job_ids:
        return []
    pieces = [
        Piece(gpu_id, start, end, ref, user, "")
        for gpu_id, start, end, ref, user in Allocation.objects.filter(job_id__in=job_ids).values_list(
            "gpu_id", "start", "end", "job__external_id", "job__user"
        )
    ]
    Job.objects.filter(pk__in=job_ids).delete()
    return pieces


def _known_runs(refs: set[str]) -> dict[str, list[tuple[int, datetime, datetime | None]]]:
    """The started runs of the known jobs each ``job_ref`` names, in start order: Slurm job ``<id>``
    and array tasks ``<id>_<n>``, Kubernetes ``<uid>``."""
    named = [parsed for ref in sorted(refs) if (parsed := parse_job_ref(ref))]
    slurm = [ext for source, ext in named if source == JobSource.SLURM]
    pods = [ext for source, ext in named if source == JobSource.KUBERNETES]
    if not named:
        return {}
    match = Q(source=JobSource.KUBERNETES, external_id__in=pods) | Q(source=JobSource.SLURM, external_id__in=slurm)
    if slurm:
        tasks = Q()
        for ext in slurm:
            tasks |= Q(external_id__startswith=f"{ext}_")
        match |= Q(tasks, source=JobSource.SLURM)
    runs = defaultdict(list)
    jobs = Job.objects.filter(match, start_time__isnull=False).order_by("start_time", "pk")
    for pk, source, ext, start, end in jobs.values_list("pk", "source", "external_id", "start_time", "end_time"):
        if source == JobSource.SLURM:
            base, _sep, task = ext.partition("_")
            if task and not DIGITS.fullmatch(task):
                continue  # "<id>_<something>" is not an array task
            runs[f"job_{base}"].append((pk, start, end))
        else:
            runs[f"k8s-pod:{ext}"].append((pk, start, end))
    return runs


def _attribute_pieces(pieces: list[Piece], gap: timedelta):
    """Split presence between known runs ``{(job id, gpu id): [ranges]}`` and observed keys
    ``{external id: [pieces]}``."""
    runs = _known_runs({p.ref for p in pieces if p.ref})
    known, observed = defaultdict(list), defaultdict(list)
    for piece in pieces:
        matched, rest = split_by_runs((piece.start, piece.end), runs.get(piece.ref, []), gap)
        for job_id, start, end in matched:
            known[(job_id, piece.gpu_id)].append((start, end))
        for start, end in rest:
            observed[piece.observed_key].append(Piece(piece.gpu_id, start, end, piece.ref, piece.user, piece.hostname))
    return known, observed


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
