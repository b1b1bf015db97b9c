"""Servers away: Redis for two minutes (pages and the API keep serving, collection and rollups catch up
after), PostgreSQL for one (pages answer a readable 503, nothing is lost, no cursor runs ahead)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from chaos import checks
from chaos.observe import Prober, probe_once, wait_for
from chaos.verdicts import SKIP, Verdict, probe_problems, probe_summary, verdict


def redis(ctx) -> Verdict:
    name = "redis-outage"
    if not ctx.stack.own_redis:
        return Verdict(name, SKIP, "REDIS_URL names a server the harness does not own: not stopped")
    problems = probe_problems(probe_once(ctx.base_url, ctx.browser), status=200)
    began = datetime.now(UTC)
    ctx.stack.redis_stop()
    if not wait_for(lambda: not ctx.stack.redis_answers(), timeout_s=10):
        return verdict(name, ["Redis still answers after SHUTDOWN"], "")
    with Prober(ctx.base_url, ctx.browser) as prober:
        time.sleep(ctx.redis_outage_s)
    ctx.stack.redis_start()
    back, returned = time.monotonic(), datetime.now(UTC)
    problems += [f"pages: {p}" for p in probe_problems(prober.pages, status=200)]
    problems += [f"API: {p}" for p in probe_problems(prober.api, status=200)]
    collected, counts = checks.collection(ctx.stack.tokens, timeout_s=ctx.catch_up_s)
    rolled, rollup_evidence = checks.rollups(since=began - timedelta(minutes=1), until=returned,
                                               timeout_s=ctx.catch_up_s)
    caught_up_s = time.monotonic() - back
    problems += collected + rolled + [f"stopped: {d}" for d in ctx.stack.dead()]
    return verdict(name, problems, f"away={ctx.redis_outage_s}s pages {probe_summary(prober.pages)} api "
                                   f"{probe_summary(prober.api)} {counts} {rollup_evidence} caught_up_in={caught_up_s:.0f}s")


def postgres(ctx) -> Verdict:
    from django.db import connections

    from cluster.models import CollectionState

    name = "postgres-outage"
    if not ctx.stack.own_postgres:
        return Verdict(name, SKIP, "DATABASE_URL names a server the harness does not own: not stopped")
    problems = probe_problems(probe_once(ctx.base_url, ctx.browser), status=200)
    cursors = dict(CollectionState.objects.values_list("node__hostname", "cursor"))
    connections.close_all()
    ctx.stack.postgres_stop()
    with Prober(ctx.base_url, ctx.browser) as prober:
        time.sleep(ctx.postgres_outage_s)
    ctx.stack.postgres_start()
    connections.close_all()
    problems += [f"pages: {p}" for p in probe_problems(prober.pages, status=503, html=True)]
    problems += [f"API: {p}" for p in probe_problems(prober.api, status=503)]
    after = dict(CollectionState.objects.values_list("node__hostname", "cursor"))
    problems += [f"{host}: cursor went back from {cursor} to {after.get(host)}" for host, cursor in cursors.items()
                 if after.get(host, 0) < cursor]
    collected, counts = checks.collection(ctx.stack.tokens, timeout_s=ctx.catch_up_s)
    recovered = wait_for(lambda: not probe_problems(probe_once(ctx.base_url, ctx.browser), status=200), timeout_s=30)
    problems += collected + ([] if recovered else ["pages did not answer 200 again within 30 s"])
    problems += [f"stopped: {d}" for d in ctx.stack.dead()]
    return verdict(name, problems, f"away={ctx.postgres_outage_s}s pages {probe_summary(prober.pages)} api "
                                   f"{probe_summary(prober.api)} {counts}")
