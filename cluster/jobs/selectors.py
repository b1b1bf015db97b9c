"""Reads for the job pages: the scoped, filtered and sorted list; one job's allocations, its GPUs' minute
rollups and its other runs (DESIGN.md §2, §4). The KPIs themselves are pure maths in ``job_kpis``."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import pandas as pd
from django.conf import settings
from django.db import connection
from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.utils.translation import gettext

from cluster.jobs.input_bound import InputBound, InputBoundRule, input_bound
from cluster.jobs.kpis import AllocationSpan, MinuteUsage, RunRecord
from cluster.models import Allocation, AllocationOrigin, Job, JobState, MinuteRollup
from core.timeutils import business_day_bounds
from teams.models import ApiToken, Team
from teams.roles import is_admin
from teams.tokens import ApiTokenKind

USAGE_COLUMNS = ["gpu_id", "gpu", "bucket_ms", "util_mean", "util_max", "coverage", "util_covered_s"]
_EPOCH = pd.Timestamp(0, tz="UTC")
_STATE_RANK = Case(
    *(When(state=value, then=Value(rank)) for rank, value in enumerate(JobState.values)),
    default=Value(len(JobState.values)), output_field=IntegerField(),
)


def _ordering(sort: str) -> list:
    """ORDER BY for a whitelisted ``sort`` value (``cluster.inventory.filters.JOB_SORTS``); jobs without the time
    sorted on come last either way, and the id breaks ties so pages never overlap."""
    descending = sort.startswith("-")
    column = {
        "submit": F("submit_time"), "start": F("start_time"), "end": F("end_time"), "gpus": F("gpu_count"),
        "state": _STATE_RANK,
    }[sort.lstrip("-")]
    if descending:
        return [column.desc(nulls_last=True), F("id").desc()]
    return [column.asc(nulls_last=True), F("id").asc()]


def jobs_for_list(user, filters: Mapping) -> QuerySet[Job]:
    """The runs ``user`` may see (admin and finance: all; leads and engineers: their teams'), filtered
    and sorted by ``filters`` (the valid values of :class:`cluster.inventory.filters.JobFilterForm`: ``team``,
    ``project``, ``user``, ``state``, ``gpu_model``, ``started_after`` / ``started_before`` as
    business-zone dates, both days included, and ``sort``). Each row carries its team, project and GPU
    model, and ``placed_gpu_count`` / ``placed_gpu_model``: the distinct GPUs its allocations name, for
    jobs whose record gives no count or model (observed ones). One query per page, whatever its size."""
    placed = Allocation.objects.filter(job=OuterRef("pk"), gpu__isnull=False)
    jobs = (
        Job.objects.visible_to(user)
        .select_related("team", "project", "gpu_model")
        .annotate(
            placed_gpu_count=Coalesce(
                Subquery(placed.order_by().values("job").annotate(n=Count("gpu", distinct=True)).values("n")), 0
            ),
            placed_gpu_model=Subquery(placed.order_by("gpu__model__short_name").values("gpu__model__short_name")[:1]),
        )
    )
    if filters.get("team"):
        jobs = jobs.filter(team=filters["team"])
    if filters.get("project"):
        jobs = jobs.filter(project=filters["project"])
    if filters.get("user"):
        jobs = jobs.filter(user=filters["user"])
    if filters.get("state"):
        jobs = jobs.filter(state=filters["state"])
    if model := filters.get("gpu_model"):
        on_model = Allocation.objects.filter(Q(gpu__model=model) | Q(gpu__isnull=True, gpu_model=model), job=OuterRef("pk"))
        jobs = jobs.filter(Q(gpu_model=model) | Exists(on_model))
    if filters.get("started_after"):
        jobs = jobs.filter(start_time__gte=business_day_bounds(filters["started_after"])[0])
    if filters.get("started_before"):
        jobs = jobs.filter(start_time__lt=business_day_bounds(filters["started_before"])[1])
    return jobs.order_by(*_ordering(filters.get("sort") or "-submit"))


def job_allocations(job: Job) -> list[Allocation]:
    """The job's allocations with their GPU, node and model, placed ones first, in one query."""
    return list(
        job.allocations.select_related("gpu__node", "gpu__model", "gpu_model").order_by(
            F("gpu__node__hostname").asc(nulls_last=True), "gpu__index", "gpu__mig_profile", "start", "id"
        )
    )


def job_window(job: Job, *, now: datetime) -> tuple[datetime, datetime] | None:
    """``[start, end or now)`` of the run; ``None`` when it never started."""
    if job.start_time is None:
        return None
    return job.start_time, max(job.end_time or now, job.start_time)


def job_usage(job: Job, *, now: datetime) -> pd.DataFrame:
    """Minute rollups of the GPUs the job's allocations name, over the minutes of ``[start, end or now)``,
    in one query (none when the job never started), as tidy rows: ``gpu_id``, ``gpu`` (label: node and
    index, and the MIG profile of an instance), ``bucket_ms`` (minute start, epoch ms), ``util_mean`` and
    ``util_max`` (%), ``coverage`` (covered seconds ÷ 60) and ``util_covered_s``. Rows come per GPU
    (node, index, whole GPU before its MIG instances), then time; a minute with no rollup has no row."""
    window = job_window(job, now=now)
    if window is None:
        return _empty_usage()
    start, end = window
    first_minute = start.astimezone(UTC).replace(second=0, microsecond=0)
    rows = list(
        MinuteRollup.objects.filter(
            gpu_id__in=Allocation.objects.filter(job=job, gpu__isnull=False).values("gpu_id"),
            bucket__gte=first_minute, bucket__lt=end,
        )
        .order_by(
            "gpu__node__hostname", "gpu__index", F("gpu__mig_parent_id").asc(nulls_first=True), "gpu__mig_profile",
            "gpu__uuid", "bucket",
        )
        .values(
            "gpu_id", "gpu__node__hostname", "gpu__index", "gpu__mig_parent_id", "gpu__mig_profile", "bucket",
            "util_mean", "util_max", "covered_s", "util_covered_s",
        )
    )
    if not rows:
        return _empty_usage()
    frame = pd.DataFrame.from_records(rows)
    return pd.DataFrame({
        "gpu_id": frame["gpu_id"].astype("int64"),
        "gpu": frame["gpu_id"].map(_gpu_labels(frame)),
        "bucket_ms": (pd.to_datetime(frame["bucket"], utc=True) - _EPOCH) // pd.Timedelta(1, "ms"),
        "util_mean": frame["util_mean"].astype("float64"),
        "util_max": frame["util_max"].astype("float64"),
        "coverage": frame["covered_s"] / MinuteRollup.BUCKET_S,
        "util_covered_s": frame["util_covered_s"].astype("int64"),
    })[USAGE_COLUMNS]


def _empty_usage() -> pd.DataFrame:
    return pd.DataFrame({
        "gpu_id": pd.Series(dtype="int64"), "gpu": pd.Series(dtype="object"), "bucket_ms": pd.Series(dtype="int64"),
        "util_mean": pd.Series(dtype="float64"), "util_max": pd.Series(dtype="float64"),
        "coverage": pd.Series(dtype="float64"), "util_covered_s": pd.Series(dtype="int64"),
    })


def _gpu_labels(frame: pd.DataFrame) -> dict[int, str]:
    """``h200-a · GPU 0``, or ``h200-a · GPU 0 · 1g.10gb`` for a MIG instance (a job may span nodes)."""
    labels = {}
    gpus = frame.drop_duplicates("gpu_id")
    for gpu_id, hostname, index, parent, profile in gpus[
        ["gpu_id", "gpu__node__hostname", "gpu__index", "gpu__mig_parent_id", "gpu__mig_profile"]
    ].itertuples(index=False):
        label = f"{hostname} · " + gettext("GPU %(index)s") % {"index": index}
        if pd.notna(parent):
            label = f"{label} · {profile or gettext('MIG')}"
        labels[gpu_id] = label if label not in labels.values() else f"{label} ({gpu_id})"
    return labels


def minutes_of(usage: pd.DataFrame) -> list[MinuteUsage]:
    """The KPI records of :func:`job_usage`'s rows."""
    return [
        MinuteUsage(
            gpu_id=int(gpu_id), minute=datetime.fromtimestamp(bucket_ms / 1000, UTC),
            util_mean=None if pd.isna(util_mean) else float(util_mean), util_covered_s=int(util_covered_s),
        )
        for gpu_id, bucket_ms, util_mean, util_covered_s in usage[
            ["gpu_id", "bucket_ms", "util_mean", "util_covered_s"]
        ].itertuples(index=False)
    ]


def input_bound_rule() -> InputBoundRule:
    """The input-bound rule's thresholds from the settings ``CARDHOUR_INPUT_BOUND_*``."""
    return InputBoundRule(
        high_pct=settings.CARDHOUR_INPUT_BOUND_HIGH_PCT, low_pct=settings.CARDHOUR_INPUT_BOUND_LOW_PCT,
        min_minutes=settings.CARDHOUR_INPUT_BOUND_MIN_MINUTES, min_share_pct=settings.CARDHOUR_INPUT_BOUND_MIN_SHARE_PCT,
        min_dips=settings.CARDHOUR_INPUT_BOUND_MIN_DIPS, max_dip_minutes=settings.CARDHOUR_INPUT_BOUND_MAX_DIP_MINUTES,
    )


def job_minute_utilization(usage: pd.DataFrame, shares: Mapping[int, int]) -> list[float]:
    """The job's utilization per measured minute (%, in time order) from :func:`job_usage`'s rows: each
    minute's GPUs' means weighted by their measured seconds times the job's share of each GPU (``shares``:
    GPU id → ticks per second). The same sum as :func:`jobs_minute_utilization`, without a query."""
    rows = usage[usage["util_mean"].notna() & (usage["util_covered_s"] > 0)]
    if rows.empty:
        return []
    weight = rows["util_covered_s"] * rows["gpu_id"].map(shares).fillna(0)
    frame = pd.DataFrame({"bucket_ms": rows["bucket_ms"], "weighted": rows["util_mean"] * weight, "weight": weight})
    sums = frame[frame["weight"] > 0].groupby("bucket_ms", sort=True)[["weighted", "weight"]].sum()
    return (sums["weighted"] / sums["weight"]).tolist()


def jobs_minute_utilization(job_ids: list[int], start: datetime, end: datetime) -> dict[int, list[float]]:
    """Each job's utilization per measured minute of ``[start, end)`` (%, in time order), as
    :func:`job_minute_utilization` weighs it, over the GPUs its placed allocations held in those minutes
    (at most ``CARDHOUR_INPUT_BOUND_SAMPLE_GPUS`` of them, the first by id: a data-parallel job's GPUs wait
    for the same batch): one query, one row per job (the minutes as an array). It reads every minute rollup
    of those GPUs in the window, so callers pass the jobs a page shows, not thousands."""
    if not job_ids:
        return {}
    sql = f"""
        SELECT job_id, array_agg(util ORDER BY bucket) FROM (
            SELECT a.job_id, m.bucket,
                   sum(m.util_mean * m.util_covered_s * a.share) / sum(m.util_covered_s * a.share) AS util
            FROM (SELECT job_id, gpu_id, share, start, "end",
                         dense_rank() OVER (PARTITION BY job_id ORDER BY gpu_id) AS nth
                  FROM {Allocation._meta.db_table}
                  WHERE job_id = ANY(%(ids)s) AND gpu_id IS NOT NULL) a
            JOIN {MinuteRollup._meta.db_table} m ON m.gpu_id = a.gpu_id
                 AND m.bucket >= date_trunc('minute', a.start) AND m.bucket < coalesce(a."end", %(end)s)
            WHERE a.nth <= %(gpus)s
              AND m.bucket >= %(start)s AND m.bucket < %(end)s
              AND m.util_mean IS NOT NULL AND m.util_covered_s > 0
            GROUP BY a.job_id, m.bucket
        ) minutes GROUP BY job_id
    """  # noqa: S608 (names from model metadata; values are bound)
    with connection.cursor() as cursor:
        cursor.execute(sql, {"ids": list(job_ids), "start": start, "end": end,
                             "gpus": settings.CARDHOUR_INPUT_BOUND_SAMPLE_GPUS})
        return {job_id: [float(value) for value in values] for job_id, values in cursor.fetchall()}


def jobs_input_bound(job_ids: list[int], start: datetime, end: datetime) -> dict[int, InputBound]:
    """The input-bound verdict of each job over ``[start, end)`` (jobs with no measured minute left out):
    :func:`jobs_minute_utilization`'s one query, then the pure rule."""
    rule = input_bound_rule()
    return {job_id: input_bound(series, rule) for job_id, series in jobs_minute_utilization(job_ids, start, end).items()}


def spans_of(allocations: list[Allocation]) -> list[AllocationSpan]:
    """The spans that count the job's usage, once (``AllocationQuerySet.counted`` in Python, for one
    job's already-fetched allocations): placed scheduler ones if any, else observed ones, else unplaced."""
    placed = [a for a in allocations if a.origin == AllocationOrigin.SCHEDULER and a.gpu_id is not None]
    observed = [a for a in allocations if a.origin == AllocationOrigin.OBSERVED]
    counted = placed or observed or [a for a in allocations if a.gpu_id is None]
    return [AllocationSpan(gpu_id=a.gpu_id, share=a.share, start=a.start, end=a.end) for a in counted]


def job_runs(job: Job, *, user) -> list[Job]:
    """Every run of the job's source and id that ``user`` may see, this one included, in start order
    (a run that never started last), in one query."""
    return list(
        Job.objects.visible_to(user)
        .filter(source=job.source, external_id=job.external_id)
        .only("id", "source", "external_id", "state", "submit_time", "start_time", "end_time", "team_id")
        .order_by(F("start_time").asc(nulls_last=True), "id")
    )


def runs_of(runs: list[Job]) -> list[RunRecord]:
    return [RunRecord(start=run.start_time, end=run.end_time, state=run.state) for run in runs]


# Who may read and write jobs through the API (DESIGN.md §2), beside the pages' reads above.
def is_service_token(request) -> bool:
    """Whether a service token (a scheduler hook's credential) authenticated the request."""
    return isinstance(request.auth, ApiToken) and request.auth.kind == ApiTokenKind.SERVICE


def teams_writable_by(request):
    """Teams whose jobs the caller may write: all for service tokens and admins, else the teams they lead."""
    if is_service_token(request) or is_admin(request.user):
        return Team.objects.all()
    return Team.objects.led_by(request.user)


def jobs_readable_by(request):
    """Jobs the caller may read: a service token writes every team's jobs, so it reads them too."""
    return Job.objects.all() if is_service_token(request) else Job.objects.visible_to(request.user)
