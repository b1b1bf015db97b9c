"""Checks more than one scenario makes: the samples collected against the agents' spools, and the
rollups against a recompute from the raw samples."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from chaos.observe import agent_last_seqs, collected_up_to, gpu_spans, node_counts, wait_for
from chaos.verdicts import count_problems, count_totals, gap_problems, row_differences


class Rollback(Exception):
    """Raised inside a transaction to undo it: a clean re-run read, then thrown away."""


def collection(tokens: dict[str, dict], *, timeout_s: float) -> tuple[list[str], str]:
    """Wait for the collector to reach what every agent has produced by now; then no record lost, none
    doubled, no hole in any GPU's samples. Returns (problems, evidence)."""
    target = agent_last_seqs(tokens)
    caught_up = wait_for(lambda: collected_up_to(target), timeout_s=timeout_s)
    counts = node_counts(target)
    # The agents go on sampling: what they have produced is read after the rows, so that no cursor can
    # be ahead of it by a race.
    latest = agent_last_seqs(tokens)
    counts = [replace(c, produced=latest[c.node]) for c in counts]
    problems = count_problems(counts, caught_up=False) + gap_problems(gpu_spans(target))
    if not caught_up:
        problems.append(f"the collector did not reach the agents' last seqs {sorted(target.values())} in {timeout_s:.0f}s")
    return problems, count_totals(counts)


def rollup_rows(start: datetime, end: datetime) -> list[tuple]:
    from cluster.models import MinuteRollup

    fields = [f.attname for f in MinuteRollup._meta.concrete_fields if not f.primary_key]
    return list(MinuteRollup.objects.filter(bucket__gte=start, bucket__lt=end).values_list(*fields))


def rollups(*, since: datetime, until: datetime, timeout_s: float) -> tuple[list[str], str]:
    """The minute rollups from ``since``'s minute to the last whole minute, ``until``'s included, equal a
    recompute from raw (done in a transaction then rolled back), once the rollup watermark has passed them."""
    from django.db import transaction
    from django.utils import timezone

    from cluster.telemetry.rollups import recompute_range, rollup_watermark

    last = until.astimezone(UTC).replace(second=0, microsecond=0)
    wait = (last + timedelta(minutes=1, seconds=8) - timezone.now()).total_seconds()
    if wait > 0:  # that minute is whole, and its last samples collected
        time.sleep(wait)
    end = timezone.now().replace(second=0, microsecond=0)
    start = since.astimezone(UTC).replace(second=0, microsecond=0)
    if not wait_for(lambda: rollup_watermark() >= end, timeout_s=timeout_s):
        return [f"the rollups did not reach {end:%H:%M} in {timeout_s:.0f}s"], ""
    stored = rollup_rows(start, end)
    try:
        with transaction.atomic():
            recompute_range(start=start, end=end)
            recomputed = rollup_rows(start, end)
            raise Rollback
    except Rollback:
        pass
    missing, extra = row_differences(recomputed, stored)
    problems = [f"rollups: {missing} rows differ from a recompute, {extra} extra"] if missing or extra else []
    if not recomputed:
        problems.append(f"no minute rollups from {start:%H:%M} to {end:%H:%M}")
    return problems, f"rollup_rows={len(stored)} recompute_diff={missing + extra}"


def minutes_ago(minutes: float) -> datetime:
    return datetime.now(UTC) - timedelta(minutes=minutes)
