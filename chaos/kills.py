"""A worker killed with ``kill -9`` in the middle of a collection, a rollup, a usage aggregation and a
period close. Each is caught in its transaction: the harness holds a lock on the table the task writes
(``LOCK TABLE … IN SHARE MODE``), waits until a backend of the worker queues behind it, and kills the
worker's only pool process. The parent requeues the message (acks late, reject on worker lost) and beat
sends the next run; the redone result is compared with a clean re-run's rows."""

from __future__ import annotations

import os
import signal
import time

from chaos import checks, seed
from chaos.observe import backend_alive, backends_blocked_by, table_locked, wait_for
from chaos.verdicts import Verdict, row_differences, verdict


def _kill_in(ctx, model, *, send=None) -> tuple[list[str], str]:
    """Kill the worker's pool process while it waits on ``model``'s table. Returns (problems, what ran)."""
    worker_log_before = len(ctx.stack.log_text("worker"))
    with table_locked(model) as holder:
        if send is not None:
            send()
        blocked = wait_for(lambda: backends_blocked_by(holder), timeout_s=ctx.task_wait_s)
        if not blocked:
            return [f"no task wrote {model.__name__} within {ctx.task_wait_s}s"], ""
        children = ctx.stack.worker_children()
        if len(children) != 1:
            return [f"the worker has {len(children)} pool processes, not 1"], ""
        os.kill(children[0], signal.SIGKILL)
        time.sleep(1)
    backend, query = blocked[0]
    problems = []
    if not wait_for(lambda: not backend_alive(backend), timeout_s=20):
        problems.append(f"the killed task's database session {backend} lives on")
    lost = wait_for(lambda: "exited with 'signal 9 (SIGKILL)'" in ctx.stack.log_text("worker")[worker_log_before:],
                    timeout_s=10)
    if not lost:
        problems.append("the worker's log does not show its pool process killed")
    return problems, " ".join(query.split())[:60]


def collect(ctx) -> Verdict:
    from cluster.models import Sample

    problems, query = _kill_in(ctx, Sample)
    collected, counts = checks.collection(ctx.stack.tokens, timeout_s=ctx.catch_up_s)
    return verdict("kill-collect", problems + collected, f"killed in «{query}» {counts}")


def rollup(ctx) -> Verdict:
    from cluster.models import MinuteRollup

    since = checks.minutes_ago(5)
    problems, query = _kill_in(ctx, MinuteRollup, send=lambda: ctx.send("cluster.tasks.rollup_pending"))
    ctx.send("cluster.tasks.rollup_pending")
    rolled, evidence = checks.rollups(since=since, until=checks.minutes_ago(0), timeout_s=ctx.catch_up_s)
    return verdict("kill-rollup", problems + rolled, f"killed in «{query}» {evidence}")


def _usage_rows(days, gpu: int) -> list[tuple]:
    from accounting.models import DailyUsage

    return list(DailyUsage.objects.filter(day__in=days, gpu_id=gpu).values_list("day", "gpu_id", "state", "team_id", "project_id",
                                                                     "ticks"))


def usage(ctx) -> Verdict:
    from django.db import connection, transaction
    from django.utils import timezone

    from accounting.models import DailyUsage
    from accounting.usage.services import aggregate_day
    from core.timeutils import business_day_of

    marked = {}

    def make_work():
        marked.update(seed.last_month_with_usage(now=timezone.now()))
        ctx.send("accounting.tasks.usage_aggregate")

    problems, query = _kill_in(ctx, DailyUsage, send=make_work)
    if not marked:
        return verdict("kill-usage", problems or ["nothing was seeded"], "")
    days = sorted({business_day_of(marked["start"]), business_day_of(marked["end"])})
    ctx.send("accounting.tasks.usage_aggregate")

    def redone():
        rows = _usage_rows(days, marked["gpu"])
        return rows if any(team for _d, _g, _s, team, _p, _t in rows) else None

    stored = wait_for(redone, timeout_s=ctx.catch_up_s) or []
    clean = []
    try:
        with transaction.atomic():
            for day in days:
                aggregate_day(day=day, now=timezone.now(), gpu_ids=[marked["gpu"]], unplaced=False)
            clean = _usage_rows(days, marked["gpu"])
            raise checks.Rollback
    except checks.Rollback:
        pass
    connection.close()
    missing, extra = row_differences(clean, stored)
    if not stored:
        problems.append(f"the usage of {days[0]}–{days[-1]} was not redone in {ctx.catch_up_s}s")
    elif missing or extra:
        problems.append(f"usage rows: {missing} missing, {extra} extra against a clean run")
    return verdict("kill-usage", problems, f"killed in «{query}» days={len(days)} rows={len(stored)} "
                                           f"clean_rows={len(clean)} diff={missing + extra}")


def _ledger_rows(period) -> list[tuple]:
    from accounting.models import LedgerEntry

    return list(LedgerEntry.objects.filter(statement__period=period).values_list(
        "day", "team_id", "project_id", "gpu_model_id", "kind", "rate", "rate_valid_from", "ticks"))


def close(ctx) -> Verdict:
    from django.db import transaction
    from django.utils import timezone

    from accounting.models import LedgerEntry, Statement
    from accounting.money.close import CloseRefused, close_period

    seeded = seed.last_month_with_usage(now=timezone.now())
    period = seeded["period"]
    try:
        with transaction.atomic():
            close_period(period=period, now=timezone.now())
            clean = _ledger_rows(period)
            raise checks.Rollback
    except checks.Rollback:
        pass
    except CloseRefused as refused:
        return verdict("kill-close", [f"a clean close of {period:%Y-%m} is refused: {refused}"], "")
    if not clean:
        return verdict("kill-close", [f"a clean close of {period:%Y-%m} books nothing: no rows to compare"], "")
    problems, query = _kill_in(ctx, LedgerEntry, send=lambda: ctx.send("accounting.tasks.close_period",
                                                                       args=[period.strftime("%Y-%m")]))
    closed = wait_for(lambda: Statement.objects.filter(period=period, status="closed").exists(), timeout_s=ctx.catch_up_s)
    stored = _ledger_rows(period)
    statements = Statement.objects.filter(period=period).count()
    missing, extra = row_differences(clean, stored)
    if not closed:
        problems.append(f"{period:%Y-%m} was not closed again within {ctx.catch_up_s}s")
    if statements != 1:
        problems.append(f"{statements} statements for {period:%Y-%m}, not 1")
    if missing or extra:
        problems.append(f"ledger: {missing} rows missing, {extra} extra against a clean close")
    return verdict("kill-close", problems, f"killed in «{query}» statements={statements} ledger_rows={len(stored)} "
                                           f"clean_rows={len(clean)} diff={missing + extra}")
