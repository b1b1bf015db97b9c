"""Daily usage aggregates (DESIGN.md §4): computed from allocations, bookings, minute rollups and node
statuses, kept up to date incrementally, and recomputed for any range on demand.

- :func:`usage_of_window` computes the states of every GPU over any whole-minute window, live.
- :func:`aggregate_day` replaces one business day's rows (all GPUs, or some) in one transaction,
  under a per-day advisory lock: running it twice, or twice at once, leaves the same rows.
- :func:`usage_process` (Celery, every few minutes) recomputes the days that the database triggers
  marked (late samples, late or changed jobs, changed bookings, status changes) and the open days
  (from the previous run's day to today: running jobs grow without a write), then prices them again
  (``accounting.money.priced_days``: rewriting a day's rows dropped its priced rows).
- :func:`usage_recompute` rebuilds a range (``manage.py recompute_usage``).
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from datetime import date, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, Value
from django.db.models.functions import Coalesce, Greatest
from django.utils import timezone

from accounting.models import (
    DailyEnergy,
    DailyHolderUsage,
    DailyUnplacedUsage,
    DailyUsage,
    HourlyUsage,
    UsageAggregateState,
    UsageDirty,
)
from accounting.money.priced_days import price_days
from accounting.usage.detail import refinements, write_holders, write_hourly, write_model_sums
from accounting.usage.failures import UsageFailures
from accounting.usage.inputs import counted_allocations, gpu_windows, physical_gpus
from accounting.usage.states import (
    UNMEASURED,
    settle_claims,
    split_detail,
    split_energy,
    split_refined,
    split_states,
)
from cluster.bookings.slots import epoch
from cluster.models import Gpu
from cluster.telemetry.dirty_marks import floor_minute
from core.locks import wait_turn
from core.timeutils import business_day_bounds, business_day_of, business_days, business_today
from core.timewindow import WINDOW_START
from core.units import WHOLE_GPU_SHARE

logger = logging.getLogger(__name__)

GpuKey = tuple[int, str, int | None, int | None]  # (gpu id, state, team id, project id)
UnplacedKey = tuple[int, int | None, int | None]  # (team id, project id, GPU model id)
USAGE_DIRTY = UsageDirty._meta.db_table


def usage_of_window(*, start: datetime, end: datetime, now: datetime, gpu_ids: Sequence[int] | None = None,
                    energy: Counter | None = None, hourly: Counter | None = None,
                    holders: Counter | None = None, refined: Counter | None = None,
                    refined_holders: Counter | None = None) -> Counter:
    """Ticks per (GPU, state, team, project) over ``[start, end)`` (whole minutes), up to ``now``'s minute.
    With ``energy``, also adds the millijoules per (GPU, team, project) to it; with ``hourly``, the ticks
    per (GPU, hourly bucket start in epoch seconds, state, team); with ``holders``, the allocated ticks per
    (GPU, holder, state, team, project), a holder being ("job", id) or ("booking", id). All three come from
    the same pass and add up exactly to the returned figures. With ``refined`` (and ``refined_holders``),
    the refinements of busy and idle (``accounting.usage.states.REFINES``) per (GPU, refinement, team,
    project) (and per (GPU, holder, refinement, team, project))."""
    end = min(end, floor_minute(now))
    out: Counter[GpuKey] = Counter()
    if end <= start:
        return out
    lo, hi = epoch(start), epoch(end)
    threshold = settings.CARDHOUR_IDLE_THRESHOLD_PCT
    detail = hourly is not None or holders is not None or refined_holders is not None
    for window in gpu_windows(start=start, end=end, now=now, gpu_ids=gpu_ids, threshold=threshold):
        pieces = settle_claims(window.claims, WHOLE_GPU_SHARE)
        if detail:
            split = split_detail(start=lo, end=hi, capacity=WHOLE_GPU_SHARE, pieces=pieces, codes=window.codes,
                                 down=window.down)
            states = split.states
            if hourly is not None:
                for (hour, state, team_id), ticks in split.hours.items():
                    hourly[(window.gpu_id, hour, state, team_id)] += ticks
            if holders is not None:
                for (holder, state, team_id, project_id), ticks in split.holders.items():
                    holders[(window.gpu_id, holder, state, team_id, project_id)] += ticks
            if refined_holders is not None:
                for (holder, kind, team_id, project_id), ticks in split.refined_holders.items():
                    refined_holders[(window.gpu_id, holder, kind, team_id, project_id)] += ticks
        elif refined is not None:
            split = split_refined(start=lo, end=hi, capacity=WHOLE_GPU_SHARE, pieces=pieces, codes=window.codes,
                                  down=window.down)
            states = split.states
        else:
            states = split_states(start=lo, end=hi, capacity=WHOLE_GPU_SHARE, pieces=pieces, codes=window.codes,
                                  down=window.down)
        if refined is not None:
            for (kind, team_id, project_id), ticks in split.refined.items():
                refined[(window.gpu_id, kind, team_id, project_id)] += ticks
        for (state, team_id, project_id), ticks in states.items():
            out[(window.gpu_id, state, team_id, project_id)] += ticks
        if energy is not None:
            drawn = split_energy(start=lo, end=hi, capacity=WHOLE_GPU_SHARE, pieces=pieces, energy_mj=window.energy_mj)
            for (team_id, project_id), millijoules in drawn.items():
                energy[(window.gpu_id, team_id, project_id)] += millijoules
    return out


def unplaced_of_window(*, start: datetime, end: datetime, now: datetime, holders: Counter | None = None) -> Counter:
    """Ticks per (team, project, GPU model) of unplaced allocations over ``[start, end)``, up to ``now``.
    With ``holders``, also adds them per (None, ("job", id), "unmeasured", team, project) to it."""
    return unplaced_of_windows(windows=[(start, end)], now=now, holders=holders)[0]


def unplaced_of_windows(*, windows: Sequence[tuple[datetime, datetime]], now: datetime,
                        holders: Counter | None = None) -> list[Counter]:
    """:func:`unplaced_of_window` of each of ``windows`` (in order), from one read of the allocations."""
    spans = [(start, min(end, now)) for start, end in windows]
    out: list[Counter[UnplacedKey]] = [Counter() for _window in spans]
    live = [(start, end) for start, end in spans if end > start]
    if not live:
        return out
    lo, hi = min(start for start, _end in live), max(end for _start, end in live)
    rows = (
        counted_allocations().filter(gpu__isnull=True, start__lt=hi, job__team__isnull=False)
        .filter(Q(end__isnull=True) | Q(end__gt=lo))
        .values_list("share", "start", "end", "job__team_id", "job__project_id", "gpu_model_id", "job__gpu_model_id",
                     "job_id")
    )
    for share, begin, finish, team_id, project_id, model_id, job_model_id, job_id in rows:
        for index, (start, end) in enumerate(spans):
            seconds = epoch(min(finish or end, end)) - epoch(max(begin, start))
            if seconds > 0:
                out[index][(team_id, project_id, model_id or job_model_id)] += share * seconds
                if holders is not None:
                    holders[(None, ("job", job_id), UNMEASURED, team_id, project_id)] += share * seconds
    return out


def _lock_day(day: date) -> None:
    wait_turn(f"cardhour.usage.{day.isoformat()}")


@transaction.atomic
def aggregate_day(*, day: date, now: datetime, gpu_ids: Sequence[int] | None = None, unplaced: bool = True) -> int:
    """Replace ``day``'s rows of ``gpu_ids`` (None: every GPU) and, with ``unplaced``, its unplaced rows:
    daily usage, hourly usage, holders' usage and energy. Returns the rows written."""
    _lock_day(day)
    start, end = business_day_bounds(day)
    energy: Counter = Counter()
    hourly: Counter = Counter()
    holders: Counter = Counter()
    refined: Counter = Counter()
    refined_holders: Counter = Counter()
    usage = usage_of_window(start=start, end=end, now=now, gpu_ids=gpu_ids, energy=energy, hourly=hourly,
                            holders=holders, refined=refined, refined_holders=refined_holders)
    for table in (DailyUsage, DailyEnergy, HourlyUsage, DailyHolderUsage):
        old = table.objects.filter(day=day)
        if gpu_ids is not None:
            old = old.filter(gpu_id__in=gpu_ids)
        if table is DailyHolderUsage:
            old = old.filter(gpu__isnull=False)  # the unplaced jobs' rows go with the unplaced usage, below
        old.delete()
    DailyEnergy.objects.bulk_create(
        [DailyEnergy(day=day, gpu_id=gpu_id, team_id=team_id, project_id=project_id, millijoules=mj)
         for (gpu_id, team_id, project_id), mj in sorted(energy.items(), key=lambda i: (i[0][0], i[0][1] or 0, i[0][2] or 0))
         if mj > 0],
        batch_size=5000,
    )
    DailyUsage.objects.bulk_create(
        [DailyUsage(day=day, gpu_id=gpu_id, state=state, team_id=team_id, project_id=project_id, ticks=ticks,
                    **refinements(refined, (gpu_id,), state, (team_id, project_id)))
         for (gpu_id, state, team_id, project_id), ticks in sorted(usage.items(), key=_sort_key)],
        batch_size=5000,
    )
    written = len(usage) + write_hourly(day=day, hourly=hourly)
    write_model_sums(day=day)
    if unplaced:
        DailyUnplacedUsage.objects.filter(day=day).delete()
        DailyHolderUsage.objects.filter(day=day, gpu__isnull=True).delete()
        rows = unplaced_of_window(start=start, end=end, now=now, holders=holders)
        DailyUnplacedUsage.objects.bulk_create(
            DailyUnplacedUsage(day=day, team_id=team_id, project_id=project_id, gpu_model_id=model_id, ticks=ticks)
            for (team_id, project_id, model_id), ticks in rows.items()
        )
        written += len(rows)
    return written + write_holders(day=day, holders=holders, refined=refined_holders)


def _sort_key(item):
    (gpu_id, state, team_id, project_id), _ticks = item
    return gpu_id, state, team_id or 0, project_id or 0


def usage_recompute(*, start: datetime, end: datetime, now: datetime | None = None) -> list[date]:
    """Rebuild every business day that ``[start, end)`` touches, up to today."""
    now = now or timezone.now()
    days = [day for day in business_days(start, min(end, now)) if day <= business_today(now=now)]
    for day in days:
        aggregate_day(day=day, now=now)
    return days


def _claim_marks(limit: int) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            DELETE FROM {USAGE_DIRTY} WHERE id IN (
                SELECT id FROM {USAGE_DIRTY} ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
            ) RETURNING gpu_id, node_id, lo, hi
            """,  # noqa: S608 (the table name from model metadata; values are bound)
            [limit],
        )
        return cursor.fetchall()


def _days_to_redo(marks: Iterable[tuple], now: datetime) -> tuple[dict[date, set[int]], set[date]]:
    """(day → physical GPU ids, days of unplaced usage) that ``marks`` touch, up to ``now``."""
    marks = list(marks)
    node_gpus: dict[int, list[int]] = defaultdict(list)
    node_ids = {node_id for _g, node_id, _lo, _hi in marks if node_id is not None}
    for gpu_id, node_id in physical_gpus().filter(node_id__in=node_ids).values_list("pk", "node_id"):
        node_gpus[node_id].append(gpu_id)
    gpu_ids = {gpu_id for gpu_id, _n, _lo, _hi in marks if gpu_id is not None}
    parent = dict(Gpu.objects.filter(pk__in=gpu_ids, mig_parent__isnull=False).values_list("pk", "mig_parent_id"))
    by_day: dict[date, set[int]] = defaultdict(set)
    unplaced: set[date] = set()
    for gpu_id, node_id, lo, hi in marks:
        days = business_days(lo, now if hi is None else min(hi, now))  # no end: still open, up to now
        if gpu_id is not None:
            targets = [parent.get(gpu_id, gpu_id)]
        elif node_id is not None:
            targets = node_gpus.get(node_id, [])
        else:
            unplaced.update(days)
            continue
        for day in days:
            by_day[day].update(targets)
    return by_day, unplaced


def usage_process(*, now: datetime | None = None, batch: int = 20_000, open_before: date | None = None) -> dict:
    """Recompute what the triggers marked and the open days. Returns counts; rerunnable.

    With ``open_before`` (a month close: the days after its period do not matter to it), open days from
    that business day on are left to the next run (days marked there are still redone, for their GPUs);
    the run then counts as complete to that day's start, never moving ``aggregated_to`` back.

    Each unit (a day's GPUs, the day's unplaced usage) is aggregated in its own savepoint: one that fails
    is retried GPU by GPU, a GPU that still fails keeps its old rows, gets an alert naming it and the
    error, and is marked again for the next run; the rest goes on. Allocations outside the supported
    time window are not counted, and their jobs are reported (usage_failures)."""
    now = now or timezone.now()
    state, _created = UsageAggregateState.objects.get_or_create(id=1)
    open_from = business_day_of(max(state.aggregated_to or now, WINDOW_START))
    today = business_today(now=now)
    open_days = [open_from + timedelta(days=n) for n in range((today - open_from).days + 1)]
    complete_to = now
    if open_before is not None and open_days and open_days[-1] >= open_before:
        open_days = [day for day in open_days if day < open_before]
        complete_to = min(now, business_day_bounds(open_before)[0])
    failures = UsageFailures(now=now)
    redone: set[date] = set()
    marks_done = 0
    while True:
        with transaction.atomic():
            marks = _claim_marks(batch)
            if not marks:
                break
            marks_done += len(marks)
            by_day, unplaced = _days_to_redo(marks, now)
            for day in sorted(set(by_day) | unplaced):
                if day in open_days:
                    continue  # redone whole below
                _aggregate_isolated(day=day, now=now, gpu_ids=sorted(by_day[day]) if day in by_day else [],
                                    unplaced=day in unplaced, failures=failures)
                redone.add(day)
    for day in open_days:
        _aggregate_isolated(day=day, now=now, gpu_ids=None, unplaced=True, failures=failures)
    failures.mark_again()
    bad_jobs = failures.report_bad_jobs()
    price_days(redone | set(open_days), now=now)  # the days just redone lost their priced rows (triggers)
    if complete_to == now:
        UsageAggregateState.objects.filter(id=1).update(aggregated_to=now)
    else:
        UsageAggregateState.objects.filter(id=1).update(
            aggregated_to=Greatest(Coalesce("aggregated_to", Value(complete_to)), Value(complete_to)))
    return {"marks": marks_done, "days_redone": len(redone), "open_days": len(open_days),
            "failed": failures.count, "bad_jobs": bad_jobs}


def _aggregate_isolated(*, day: date, now: datetime, gpu_ids: Sequence[int] | None, unplaced: bool,
                        failures: UsageFailures) -> None:
    """``aggregate_day`` in a savepoint; on failure, GPU by GPU and the unplaced usage alone, so one bad
    GPU-day costs only itself (its old rows stay, an alert names it)."""
    try:
        aggregate_day(day=day, now=now, gpu_ids=gpu_ids, unplaced=unplaced)
    except Exception:
        logger.warning("aggregating %s failed; retrying GPU by GPU", day, exc_info=True)
    else:
        failures.succeeded(day=day, gpu_ids=gpu_ids, unplaced=unplaced)
        return
    ids = list(physical_gpus().values_list("pk", flat=True)) if gpu_ids is None else list(gpu_ids)
    for gpu_id in ids:
        try:
            aggregate_day(day=day, now=now, gpu_ids=[gpu_id], unplaced=False)
        except Exception as error:
            failures.failed(day=day, gpu_id=gpu_id, error=error)
        else:
            failures.succeeded(day=day, gpu_ids=[gpu_id], unplaced=False)
    if unplaced:
        try:
            aggregate_day(day=day, now=now, gpu_ids=[], unplaced=True)
        except Exception as error:
            failures.failed(day=day, gpu_id=None, error=error)
        else:
            failures.succeeded(day=day, gpu_ids=[], unplaced=True)


def backfill_started(*, start: datetime, before: datetime) -> None:
    """Say that history from ``start`` to ``before`` is being loaded: the boards show that its days are
    incomplete (:func:`accounting.usage.selectors.backfill_in_progress`) until :func:`backfill_done`."""
    UsageAggregateState.objects.update_or_create(id=1, defaults={"backfill_from": start, "backfill_before": before})


def backfill_done() -> None:
    UsageAggregateState.objects.filter(id=1).update(backfill_from=None, backfill_before=None)
