"""Celery tasks of the cluster app: thin wrappers that take ids or nothing, call one service, and give
the same result when run twice (DESIGN.md §7). Queues: ``collect`` (collection), ``rollup``, ``default``."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from core.locks import advisory_lock

log = logging.getLogger(__name__)


@shared_task(name="cluster.tasks.collect_all", ignore_result=True)
def collect_all() -> int:
    """Beat: fan collection out over node shards on the ``collect`` queue."""
    from cluster.inventory.selectors import collectable_node_ids
    from cluster.telemetry.selectors import collection_shards

    with advisory_lock("cluster.collect_all") as locked:
        if not locked:
            return 0
        node_ids = collectable_node_ids()
        for ids in collection_shards(node_ids, settings.TELEMETRY_COLLECT_SHARDS):
            collect_nodes.apply_async(args=[ids], expires=settings.TELEMETRY_COLLECT_EVERY_S)
        return len(node_ids)


@shared_task(name="cluster.tasks.collect_nodes", ignore_result=True)
def collect_nodes(node_ids: list[int]) -> None:
    """Collect a shard of nodes one after another (each node locks itself; a busy node is skipped)."""
    from cluster.telemetry.collector import collect_node

    for node_id in node_ids:
        try:
            collect_node(node_id=node_id)
        except Exception:
            # One node's bug must not starve the rest of its shard; it is logged with its traceback.
            log.exception("collecting node %s failed", node_id)


@shared_task(name="cluster.tasks.rollup_pending", ignore_result=True)
def rollup_pending() -> dict:
    """Recompute the minute and hour rollups of dirty buckets (safe to run concurrently)."""
    from cluster.telemetry.rollups import rollup_pending as run

    return run()


@shared_task(name="cluster.tasks.prune_telemetry", ignore_result=True)
def prune_telemetry() -> dict:
    from django.utils import timezone

    from cluster.telemetry.rollups import prune

    with advisory_lock("cluster.prune_telemetry") as locked:
        return prune(now=timezone.now()) if locked else {}


@shared_task(name="cluster.tasks.partitions_ahead", ignore_result=True)
def partitions_ahead() -> dict:
    """Make the raw samples' day partitions ahead, and those of days the DEFAULT partition caught."""
    from django.utils import timezone

    from cluster.telemetry.partitions import partitions_ahead as run

    with advisory_lock("cluster.partitions_ahead") as locked:
        return run(now=timezone.now()) if locked else {}


@shared_task(name="cluster.tasks.observed_scan", ignore_result=True)
def observed_scan() -> dict:
    """Turn the processes the agents saw into jobs and observed allocations (one scan at a time)."""
    from cluster.jobs.observed.scan import observed_scan as run

    return run()


@shared_task(name="cluster.tasks.close_quiet_alerts", ignore_result=True)
def close_quiet_alerts() -> int:
    from cluster.telemetry.collector import close_quiet_gpu_alerts

    return close_quiet_gpu_alerts()


@shared_task(name="cluster.tasks.bookings_tick", ignore_result=True)
def bookings_tick() -> dict:
    """Beat: end due bookings, warn and release idle ones, remind bookers, raise conflicts (one run at a time)."""
    from django.utils import timezone

    from cluster.bookings import watch as booking_watch

    with advisory_lock("cluster.bookings_tick") as locked:
        return booking_watch.watch(now=timezone.now()) if locked else {}

