"""Writes of the daily board's tables (issue 14): a business day's hourly usage and its holders' usage,
computed by :func:`accounting.usage.services.aggregate_day` in the same pass as the daily usage. A day of
1,000 GPUs is ~100 k hourly rows, so they go in by COPY (the rows are new: the caller deleted the old
ones in the same transaction). Then the day's hourly and daily usage summed by GPU model (:func:`write_model_sums`),
which the monthly profile and the boards' tiles read (issue 15)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, date, datetime

from django.db import connection

from accounting.models import (
    DailyHolderUsage,
    DailyModelCapacity,
    DailyModelUsage,
    DailyUsage,
    HourlyModelCapacity,
    HourlyModelUsage,
    HourlyUsage,
)
from accounting.usage.states import LOW_POWER, MEMORY_HELD, REFINES, SHALLOW, SM_MEASURED
from cluster.models import Gpu

HOURLY_USAGE = HourlyUsage._meta.db_table
DAILY_HOLDER_USAGE = DailyHolderUsage._meta.db_table
_MODEL_TABLES = {"hourly": HOURLY_USAGE, "gpu": Gpu._meta.db_table, "model_usage": HourlyModelUsage._meta.db_table,
                 "capacity": HourlyModelCapacity._meta.db_table, "daily": DailyUsage._meta.db_table,
                 "daily_model": DailyModelUsage._meta.db_table, "daily_capacity": DailyModelCapacity._meta.db_table}
# One statement each over the day's hourly rows (~100 k at 1,000 GPUs): a GROUP BY, no row reaches Python.
_MODEL_HOURS_SQL = [
    "DELETE FROM {model_usage} WHERE day = %(day)s",
    "DELETE FROM {capacity} WHERE day = %(day)s",
    """INSERT INTO {model_usage} (day, hour, gpu_model_id, state, team_id, ticks)
       SELECT h.day, h.hour, g.model_id, h.state, h.team_id, sum(h.ticks)
       FROM {hourly} h JOIN {gpu} g ON g.id = h.gpu_id WHERE h.day = %(day)s
       GROUP BY h.day, h.hour, g.model_id, h.state, h.team_id""",
    """INSERT INTO {capacity} (day, hour, gpu_model_id, gpus)
       SELECT h.day, h.hour, g.model_id, count(DISTINCT h.gpu_id) FILTER (WHERE g.mig_parent_id IS NULL)
       FROM {hourly} h JOIN {gpu} g ON g.id = h.gpu_id WHERE h.day = %(day)s
       GROUP BY h.day, h.hour, g.model_id""",
    "DELETE FROM {daily_model} WHERE day = %(day)s",
    "DELETE FROM {daily_capacity} WHERE day = %(day)s",
    """INSERT INTO {daily_model} (day, gpu_model_id, state, team_id, project_id, ticks, sm_ticks, shallow_ticks,
                                  low_power_ticks, memory_held_ticks)
       SELECT d.day, g.model_id, d.state, d.team_id, d.project_id, sum(d.ticks), sum(d.sm_ticks), sum(d.shallow_ticks),
              sum(d.low_power_ticks), sum(d.memory_held_ticks)
       FROM {daily} d JOIN {gpu} g ON g.id = d.gpu_id WHERE d.day = %(day)s
       GROUP BY d.day, g.model_id, d.state, d.team_id, d.project_id""",
    """INSERT INTO {daily_capacity} (day, gpu_model_id, gpus)
       SELECT d.day, g.model_id, count(DISTINCT d.gpu_id)
       FROM {daily} d JOIN {gpu} g ON g.id = d.gpu_id WHERE d.day = %(day)s
       GROUP BY d.day, g.model_id""",
]


def write_hourly(*, day: date, hourly: Counter) -> int:
    """COPY ``hourly`` ((GPU, bucket start in epoch seconds, state, team) → ticks) as ``day``'s rows."""
    hours: dict[int, str] = {}
    rows = []
    for (gpu_id, hour, state, team_id), ticks in sorted(hourly.items(), key=lambda i: (i[0][0], i[0][1], i[0][2], i[0][3] or 0)):
        if ticks > 0:
            moment = hours.get(hour) or hours.setdefault(hour, datetime.fromtimestamp(hour, UTC).isoformat())
            rows.append((day, moment, gpu_id, state, team_id, ticks))
    return _copy(HOURLY_USAGE, ("day", "hour", "gpu_id", "state", "team_id", "ticks"), rows)


def write_model_sums(*, day: date) -> None:
    """Rewrite ``day``'s hourly and daily usage by GPU model and its GPUs in service per hour and model and
    per day and model, from the day's hourly and daily usage as they now stand (whatever GPUs were just
    recomputed)."""
    with connection.cursor() as cursor:
        for sql in _MODEL_HOURS_SQL:
            cursor.execute(sql.format(**_MODEL_TABLES), {"day": day})


REFINED_COLUMNS = {SM_MEASURED: "sm_ticks", SHALLOW: "shallow_ticks", LOW_POWER: "low_power_ticks",
                   MEMORY_HELD: "memory_held_ticks"}


def refinements(refined: Counter, head: tuple, state: str, tail: tuple) -> dict[str, int]:
    """The refinement columns of the row ``head + (state,) + tail`` from ``refined`` (keyed ``head +
    (refinement,) + tail``): the refinements of ``state`` (``REFINES``), 0 for the others."""
    return {column: refined.get((*head, kind, *tail), 0) if REFINES[kind] == state else 0
            for kind, column in REFINED_COLUMNS.items()}


def write_holders(*, day: date, holders: Counter, refined: Counter | None = None) -> int:
    """COPY ``holders`` ((GPU or None, ("job" | "booking", id), state, team, project) → ticks) as ``day``'s rows,
    with their refinements from ``refined`` (keyed (GPU, holder, refinement, team, project))."""
    refined = refined if refined is not None else Counter()
    rows = []
    for (gpu_id, (kind, holder_id), state, team_id, project_id), ticks in holders.items():
        if ticks > 0:
            job_id, booking_id = (holder_id, None) if kind == "job" else (None, holder_id)
            parts = refinements(refined, (gpu_id, (kind, holder_id)), state, (team_id, project_id)).values()
            rows.append((day, gpu_id, job_id, booking_id, team_id, project_id, state, ticks, *parts))
    rows.sort(key=lambda r: (r[1] or 0, r[2] or 0, r[3] or 0, r[6]))
    columns = ("day", "gpu_id", "job_id", "booking_id", "team_id", "project_id", "state", "ticks", *REFINED_COLUMNS.values())
    return _copy(DAILY_HOLDER_USAGE, columns, rows)


def _copy(table: str, columns: tuple[str, ...], rows: list[tuple]) -> int:
    """COPY ``rows`` in text format, formatted here (ints, state names, ISO dates: nothing to escape), which
    is several times faster than psycopg's row-by-row adaptation."""
    if rows:
        text = "".join("\t".join("\\N" if value is None else str(value) for value in row) + "\n" for row in rows)
        with connection.cursor() as cursor, cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            copy.write(text)
    return len(rows)
