"""Finishing an import in its own process: what the Celery worker would do next, done now, so that
``import_samples`` / ``import_jobs`` / ``import_sacct`` followed by ``usage_report`` gives the figures
with no worker running (README, "Replaying history").

1. the minute rollups of the dirty minute buckets, then the hour rollups they mark
   (``cluster.telemetry.rollups.rollup_pending``, one level after the other, for the progress bars);
2. the daily aggregates (``accounting.usage.services.usage_process``): it recomputes every day that the
   database triggers marked, however old (the new minute rollups mark their GPU-minutes, new or
   changed allocations their ranges, new node status periods their nodes), and the open days.

The orchestration lives here, not in ``cluster``: accounting builds on cluster, never the reverse.
Running it twice, or beside a worker, is safe: both steps claim their work with ``SKIP LOCKED`` and
recompute from the stored inputs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import datetime
from typing import TextIO

from django.db.models import Count
from django.utils import timezone
from tqdm import tqdm

from accounting.models import UsageDirty
from accounting.usage.services import usage_process
from cluster.models import DirtyBucket, RollupLevel
from cluster.telemetry.rollups import DEFAULT_BATCH, rollup_pending


@dataclass(frozen=True)
class FinishReport:
    """What finishing did: rollup buckets recomputed, trigger marks consumed, past days redone."""

    minute_buckets: int
    hour_buckets: int
    usage_marks: int
    days_redone: int

    def summary(self) -> str:
        return (f"rolled up {self.minute_buckets} minute and {self.hour_buckets} hour bucket(s); daily aggregates: "
                f"{self.usage_marks} change mark(s), {self.days_redone} past day(s) recomputed, open days refreshed")


def replay_finish(*, now: datetime | None = None, progress: TextIO | None = None,
                  batch: int = DEFAULT_BATCH) -> FinishReport:
    """Roll up every dirty bucket, then bring the daily aggregates up to date as of ``now``.

    ``progress``: a terminal stream to draw tqdm progress bars on (None: no bars)."""
    now = now or timezone.now()
    rolled = {}
    for level in (RollupLevel.MINUTE.value, RollupLevel.HOUR.value):  # hours counted once the minutes marked them
        total = DirtyBucket.objects.filter(level=level).count()
        with _bar(f"{level} rollups", total, "bucket", progress) as bar:
            done = rollup_pending(batch=batch, max_batches=10**9, levels=[level], on_batch=bar.update)
        rolled[level] = done[f"{level}_buckets"]
    marks = UsageDirty.objects.count()
    with _bar("daily aggregates", marks, "mark", progress) as bar:
        done = usage_process(now=now)
        bar.update(marks)
    return FinishReport(rolled[RollupLevel.MINUTE.value], rolled[RollupLevel.HOUR.value], done["marks"],
                        done["days_redone"])


def _bar(label: str, total: int, unit: str, stream: TextIO | None) -> tqdm:
    return tqdm(total=total, desc=label, unit=unit, file=stream, disable=stream is None, leave=True,
                dynamic_ncols=True)


def pending_counts() -> dict[str, int]:
    """Work left to the worker anywhere: dirty minute and hour buckets, and usage change marks."""
    dirty = dict.fromkeys(RollupLevel.values, 0)
    for level, n in DirtyBucket.objects.values_list("level").annotate(n=Count("*")).order_by():
        dirty[level] = n
    return {**{f"{level}_buckets": n for level, n in dirty.items()}, "usage_marks": UsageDirty.objects.count()}


def finish_import(command, *, defer: bool) -> FinishReport | None:
    """The end of an import command: finish in this process (progress bars when stderr is a terminal),
    or with ``defer`` leave it to the worker and say what is left."""
    if defer:
        left = pending_counts()
        command.stdout.write(
            f"--defer: rollups and daily aggregates left to the Celery worker ({left['minute_buckets']} minute "
            f"bucket(s), {left['usage_marks']} usage mark(s) pending); usage_report warns until they are done"
        )
        return None
    stream = sys.stderr if command.stderr.isatty() else None
    report = replay_finish(progress=stream)
    command.stdout.write(report.summary())
    return report
