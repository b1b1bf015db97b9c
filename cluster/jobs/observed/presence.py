"""Presence for the observed-usage scan (the package docstring has the rules): which samples a scan reads
(per-node watermarks), the ranges of presence their ``processes`` show, the presence taken back from
observed jobs that a known run now claims, and how presence splits between known runs and observed keys.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from cluster.jobs.observed.ranges import DIGITS, parse_job_ref, split_by_runs
from cluster.models import Allocation, Gpu, Job, JobSource, Node, ObservedScanState, Sample

SAMPLE, GPU, NODE = Sample._meta.db_table, Gpu._meta.db_table, Node._meta.db_table
JOB, ALLOCATION = Job._meta.db_table, Allocation._meta.db_table
# Agents report free text: clip it to the Job columns so one odd process cannot fail every scan.
EXTERNAL_ID_MAX = Job._meta.get_field("external_id").max_length
USER_MAX = Job._meta.get_field("user").max_length


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


def gpu_facts() -> dict[int, GpuFacts]:
    sql = f"""
        SELECT g.id, g.node_id, n.hostname, g.mig_parent_id, g.share, g.model_id, g.status = 'active',
               (SELECT max(s.ts) FROM {SAMPLE} s WHERE s.gpu_id = g.id)
        FROM {GPU} g JOIN {NODE} n ON n.id = g.node_id
    """  # noqa: S608 (the models' tables)
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return {row[0]: GpuFacts(*row[1:]) for row in cursor.fetchall()}


def scan_from(gpus: dict[int, GpuFacts], start: datetime | None) -> dict[int, datetime]:
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


def remember_scanned(gpus: dict[int, GpuFacts]) -> None:
    for node_id, newest in _node_newest(gpus).items():
        ObservedScanState.objects.update_or_create(node_id=node_id, defaults={"scanned_to": newest})


# One row per (GPU, identity, MIG ids, range of presence): records are cut into islands where the gap
# to everything earlier of the same identity exceeds the threshold. Process entries are read
# defensively: ingest checks only that ``processes`` is a list.
PIECES_SQL = f"""
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
        SELECT s.gpu_id, s.ts, s.interval_s, s.processes FROM {SAMPLE} s
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
"""  # noqa: S608 (the model's table; values are bound)


def read_pieces(
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
TAKE_BACK_SQL = f"""
WITH recent AS (
    SELECT start_time, end_time,
           CASE WHEN source = 'slurm' THEN 'job_' || split_part(external_id, '_', 1)
                ELSE 'k8s-pod:' || external_id END AS ref
    FROM {JOB}
    WHERE updated_at >= %(since)s AND start_time IS NOT NULL
      AND ((source = 'slurm' AND external_id ~ '^[0-9]+(_[0-9]+)?$') OR (source = 'kubernetes' AND external_id <> ''))
)
SELECT DISTINCT o.id
FROM recent k
JOIN {JOB} o ON o.source = 'observed' AND o.external_id = k.ref
JOIN {ALLOCATION} a ON a.job_id = o.id
WHERE a.start < coalesce(k.end_time + %(gap)s, 'infinity') AND a."end" > k.start_time - %(gap)s
"""  # noqa: S608 (the models' tables; values are bound)


def take_back_from_observed(gap: timedelta) -> list[Piece]:
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


def attribute_pieces(pieces: list[Piece], gap: timedelta):
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
