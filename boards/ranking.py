"""Idle allocations, ranked, on the daily board (issue 14): the day in scope's allocations through
:func:`accounting.money.idle_ranking.rank_idle`, the one ranking the team page uses too (issue 15)."""

from __future__ import annotations

from accounting.models import DailyUsage
from accounting.money.idle_ranking import IdleRow, mark_input_bound, rank_idle
from accounting.usage.refined import Refined, refined_totals
from boards.scope import BoardScope

__all__ = ["TOP", "IdleRow", "flag_input_bound", "idle_ranking", "refined_day", "top_idle"]

TOP = 20


def idle_ranking(scope: BoardScope, *, user) -> list[IdleRow]:
    """Every allocation of the day in scope, most idle first (ties: most allocated, then team, then label).
    Five queries (holders, teams, jobs, bookings, rates) whatever their number."""
    return top_idle(scope, user=user)[0]


def top_idle(scope: BoardScope, *, user, limit: int | None = None) -> tuple[list[IdleRow], int]:
    """The first ``limit`` rows of :func:`idle_ranking` (all: None) and the number of rows in all: the
    jobs and bookings are read, and the costs computed, for the rows shown only (the board shows 20 of
    thousands)."""
    return rank_idle(scope.day, scope.day, user=user, gpus=scope.gpu_q(), narrowed_to_gpus=scope.narrowed_to_gpus,
                     gpu_model_id=scope.gpu_model_id, team_id=scope.team_id, limit=limit)


def flag_input_bound(rows: list[IdleRow], scope: BoardScope) -> list[IdleRow]:
    """The input-bound hint (issue 19) on the job rows shown, over the day in scope: one query."""
    return mark_input_bound(rows, scope.day, scope.day)


def refined_day(scope: BoardScope) -> Refined:
    """The day's busy and idle card-hours in scope refined by SM activity, memory and power (issue 16): the
    GPUs' daily usage (placed only: an unplaced job has no GPU to measure), one query."""
    rows = DailyUsage.objects.filter(scope.gpu_q(), day=scope.day)
    if scope.team_id is not None:
        rows = rows.filter(team_id=scope.team_id)
    return refined_totals(rows)
