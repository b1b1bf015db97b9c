"""The daily board as one object (issue 14), and its JSON: the page, its live refresh and
``GET /api/v1/boards/daily/`` all read :func:`daily_board` and the API and live refresh write
:func:`board_json`, so a figure is the same wherever it is shown (one number, one source)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

import numpy as np
import pandas as pd
from django.conf import settings

from accounting.usage.refined import Refined
from boards.charts import group_matrix, heatmap_matrix
from boards.figures import Headline, headline
from boards.health import HealthView, NodeHealth, node_health
from boards.hours import (
    SERIES,
    DayRows,
    computed_to,
    day_hours,
    group_hours,
    read_day,
    timeline,
    utilization_bands,
)
from boards.maths import BANDS, CELL_KINDS, GPU_ROWS, band_label, band_shares, heatmap_level, total_bands
from boards.movers import AlwaysFull, IdlePower, LongIdle, always_full_top, busy_at_idle_power, long_idle_top
from boards.ranking import IdleRow, refined_day, top_idle
from boards.scope import BoardScope
from cluster.jobs.kpis import percent
from core.units import TICKS_PER_CARD_HOUR
from teams.models import Team

PARTS = ("headline", "hours", "ranking", "movers", "bands", "health")
LIVE_PARTS = ("headline", "hours", "health")


@dataclass
class DailyBoard:
    scope: BoardScope
    computed_to: datetime
    headline: Headline | None = None
    hours: pd.DataFrame | None = None  # per GPU-hour (``level`` GPU_ROWS), else per node-hour or pool-hour
    level: str = GPU_ROWS  # what a heatmap row is (boards.maths.heatmap_level)
    timeline: pd.DataFrame | None = None
    ranking: list[IdleRow] | None = None  # all of them, or the first ``ranking_limit``
    ranking_total: int = 0
    long_idle: list[LongIdle] | None = None  # all of them, or the first ``movers_limit``
    long_idle_total: int = 0
    always_full: list[AlwaysFull] | None = None  # all of them, or the first ``movers_limit``
    always_full_total: int = 0
    idle_power: list[IdlePower] | None = None
    refined: Refined | None = None  # shallow busy, memory held, busy at idle power over the board (issue 16)
    bands: dict | None = None
    team_names: dict = field(default_factory=dict)
    health: list[NodeHealth] | None = None

    @property
    def health_view(self) -> HealthView | None:
        return HealthView.of(self.health) if self.health is not None else None


def daily_board(scope: BoardScope, *, user, parts: tuple[str, ...] = PARTS, ranking_limit: int | None = None,
                movers_limit: int | None = None) -> DailyBoard:
    """The board of ``scope`` as ``user`` may see it, with the ``parts`` asked for; the idle ranking's
    first ``ranking_limit`` rows only (all: None), with ``ranking_total`` the number in all, and as much of
    the long-idle and always-full lists by ``movers_limit`` (their ``*_total`` the numbers in all)."""
    board = DailyBoard(scope=scope, computed_to=computed_to(scope))
    if "headline" in parts:
        board.headline = headline(scope, user=user)
    day = read_day(scope) if {"hours", "bands", "movers"} & set(parts) else None  # one read for all three
    if "hours" in parts:
        board.level = level_of(day)
        if board.level == GPU_ROWS:
            board.hours = day_hours(scope, user=user, done=board.computed_to, day=day)
        else:  # no per-GPU frame and no holders: the heatmap and the timeline need the groups' sums only
            board.hours = group_hours(scope, by=board.level, done=board.computed_to, day=day)
        board.timeline = timeline(board.hours, scope)
    if "ranking" in parts:
        board.ranking, board.ranking_total = top_idle(scope, user=user, limit=ranking_limit)
    if "movers" in parts:
        board.long_idle, board.long_idle_total = long_idle_top(scope, user=user, limit=movers_limit)
        board.always_full, board.always_full_total = always_full_top(scope, user=user, day=day, limit=movers_limit)
        board.idle_power = busy_at_idle_power(scope, user=user)
    if "ranking" in parts:
        board.refined = refined_day(scope)
    if "bands" in parts:
        board.bands = utilization_bands(scope, day=day)
        ids = [t for t in board.bands if t is not None]
        board.team_names = dict(Team.objects.filter(pk__in=ids).values_list("pk", "name"))
    if "health" in parts:
        board.health = node_health(scope)
    return board


def level_of(day: DayRows) -> str:
    """What the heatmap's rows are for the GPUs with usage on ``day`` (settings ``CARDHOUR_BOARD_GPU_ROWS``
    and ``CARDHOUR_BOARD_NODE_ROWS``)."""
    return heatmap_level(gpus=len(day.gpus), nodes=len({g[1] for g in day.gpus}), pools=len({g[3] for g in day.gpus}),
                         max_gpu_rows=settings.CARDHOUR_BOARD_GPU_ROWS, max_node_rows=settings.CARDHOUR_BOARD_NODE_ROWS)


# ---- JSON --------------------------------------------------------------------------------------------------

def _num(value):
    if value is None:
        return None
    if isinstance(value, Decimal):
        return str(value)
    return value


def _time(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def _ch(ticks) -> str:
    return str((Decimal(int(ticks)) / TICKS_PER_CARD_HOUR).quantize(Decimal("0.0001")))


def board_json(board: DailyBoard) -> dict:
    """The board's figures as JSON-ready data: card-hours and money as decimal strings, percentages as
    decimal strings with one place, times RFC 3339 in UTC; a part not computed is absent."""
    scope = board.scope
    out: dict = {"date": scope.day.isoformat(), "live": scope.live, "computed_to": _time(board.computed_to)}
    if board.headline is not None:
        head = board.headline
        out["currency"] = head.currency
        out["tiles"] = {
            tile.key: {"value": _num(tile.value), "mean_previous_7_days": _num(tile.change.mean),
                       "change": _num(tile.change.delta)} | ({"card_hours": _num(tile.card_hours)} if tile.card_hours is not None else {})
            for tile in head.tiles if not (tile.kind == "money" and not head.sees_costs)
        }
        out["unplaced_card_hours"] = _num(head.unplaced_card_hours)
        out["teams"] = [_team_json(row) for row in head.teams]
    if board.timeline is not None:
        out["timeline"] = [
            {"hour": _time(row.hour), **{s: _ch(getattr(row, s)) for s in SERIES}, "capacity": _ch(row.capacity),
             "partial": bool(row.partial)}
            for row in board.timeline.itertuples(index=False)
        ]
        out["heatmap"] = _heatmap_json(board.hours) if board.level == GPU_ROWS else _group_heatmap_json(board)
    if board.ranking is not None:
        out["idle_allocations"] = [_idle_json(row) for row in board.ranking]
    if board.long_idle is not None:
        out["long_idle"] = _long_idle_json(board)
        out["always_full"] = _always_full_json(board)
        out["busy_at_idle_power"] = [
            {"gpu": row.label, "gpu_model": row.model, "card_hours": _num(row.card_hours),
             "busy_card_hours": _num(row.busy_card_hours), "floor_w": row.floor_w, "teams": row.holders.teams,
             "holders": [label for _k, _i, label in row.holders.labels]}
            for row in board.idle_power
        ]
    if board.refined is not None:
        refined = board.refined
        out["beyond_duty_cycle"] = {
            "card_hours_busy": _ch(refined.busy), "card_hours_busy_with_sm_data": _ch(refined.sm),
            "card_hours_shallow_busy": _num(refined.shallow_card_hours), "shallow_share_pct": _num(refined.shallow_share),
            "card_hours_busy_at_idle_power": _ch(refined.low_power), "card_hours_idle": _ch(refined.idle),
            "card_hours_idle_memory_held": _ch(refined.memory_held), "no_sm_data": refined.no_sm_data,
        }
    if board.bands is not None:
        total = total_bands(board.bands)
        out["utilization_bands"] = [
            {"band": band_label(band), "share_pct": _num(percent(share)), "card_hours": _ch(ticks)}
            for band, share, ticks in zip(BANDS, band_shares(total), total, strict=True)
        ]
    if board.health is not None:
        out["nodes"] = [
            {"node": row.hostname, "pool": row.pool, "status": row.status, "lag_s": row.lag_s,
             "data_complete_to": _time(row.data_complete_to), "xid_alerts": row.xid_alerts,
             "ecc_alerts": row.ecc_alerts, "gpus_missing": row.gpus_missing, "problem": row.problem}
            for row in board.health
        ]
    return out


def _heatmap_json(hours: pd.DataFrame) -> dict:
    """The heatmap as matrices (``level`` "gpu": a row per GPU, a column per hour): 24,000 cells at 1,000 GPUs stay one
    compact answer. ``kind`` is measured, unmeasured, other_teams, unallocated or down (null: no row)."""
    if hours.empty:
        return {"level": GPU_ROWS, "gpus": [], "hours": [], "kind": [], "util_pct": [], "teams": [], "holders": []}
    cells = heatmap_matrix(hours)
    names = np.array([*CELL_KINDS, None], dtype=object)  # -1 (no row): the last, None
    kind = names[cells.kinds].tolist()
    measured = np.where(cells.kinds == 0, np.round(cells.util, 1), np.nan).tolist()
    return {
        "level": GPU_ROWS, "gpus": cells.labels, "hours": [_time(h) for h in cells.hours], "kind": kind,
        "util_pct": [[None if v != v else v for v in row] for row in measured],
        "teams": cells.matrix(list(hours["teams"]), []), "holders": cells.matrix(list(hours["holders"]), []),
    }


def _group_heatmap_json(board: DailyBoard) -> dict:
    """The heatmap at scale: a row per node (``nodes``) or pool (``pools``) with ``gpus`` GPUs each, a column
    per hour; ``kind`` and ``util_pct`` as the GPU rows' (over the group's GPU-time), ``share_pct`` each
    series' share of the group's card-hours in the hour (one place), ``teams`` the teams holding its GPUs.
    No holders: open a node's board (``node=``) for its GPUs and their jobs."""
    key = f"{board.level}s"
    hours = board.hours
    if hours.empty:
        return {"level": board.level, key: [], "gpus": [], "hours": [], "kind": [], "util_pct": [], "share_pct": {},
                "teams": []}
    cells = group_matrix(hours)
    names = np.array([*CELL_KINDS, None], dtype=object)
    measured = np.where(cells.kinds == 0, np.round(cells.util, 1), np.nan).tolist()
    return {
        "level": board.level, key: cells.labels, "gpus": cells.gpus, "hours": [_time(h) for h in cells.hours],
        "kind": names[cells.kinds].tolist(),
        "util_pct": [[None if v != v else v for v in row] for row in measured],
        "share_pct": {s: [[None if v != v else v for v in row] for row in np.round(cells.shares[n], 1).tolist()]
                      for n, s in enumerate(SERIES)},
        "teams": cells.matrix(list(hours["teams"]), []),
    }


def _long_idle_json(board: DailyBoard) -> list[dict]:
    return [
        {"gpu": row.label, "gpu_model": row.model, "since": row.since.isoformat(), "days": row.days,
         "at_least": row.at_least, "teams": row.holders.teams, "holders": [label for _k, _i, label in row.holders.labels]}
        for row in board.long_idle
    ]


def _always_full_json(board: DailyBoard) -> list[dict]:
    return [
        {"gpu": row.label, "gpu_model": row.model, "measured_minutes": row.measured_minutes,
         "min_util_pct": round(row.min_util, 1), "teams": row.holders.teams,
         "holders": [label for _k, _i, label in row.holders.labels]}
        for row in board.always_full
    ]


def _team_json(row) -> dict:
    quota = row.quota
    return {
        "team": row.name or None, "card_hours_allocated": _num(row.allocated), "card_hours_busy": _num(row.busy),
        "card_hours_idle": _num(row.idle), "card_hours_unmeasured": _num(row.unmeasured),
        "efficiency_pct": _num(row.efficiency), "idle_cost": _num(row.idle_cost), "usage_cost": _num(row.cost),
        "quota_used_pct": _num(quota.used_percent) if quota else None,
        "quota_run_out": quota.forecast.run_out.isoformat() if quota and quota.forecast.run_out else None,
    }


def _idle_json(row: IdleRow) -> dict:
    # Decimal or None fields written directly (thousands of rows: no type test per value)
    return {
        "kind": row.kind, "id": row.object_id, "label": row.label or None, "team": row.team or None,
        "project": row.project or None, "user": row.user or None, "gpus": _dec(row.gpus), "allocations": row.holders,
        "card_hours_idle": str(row.idle_card_hours), "card_hours_allocated": str(row.allocated_card_hours),
        "idle_share_pct": _dec(row.idle_share), "idle_cost": _dec(row.idle_cost), "unplaced": row.unplaced,
        "card_hours_idle_memory_held": str(row.memory_held_card_hours),
        "card_hours_shallow_busy": _dec(row.shallow_card_hours), "shallow_busy_cost": _dec(row.shallow_cost),
    }


def _dec(value: Decimal | None) -> str | None:
    return None if value is None else str(value)
