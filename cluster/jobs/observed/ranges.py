"""Pure helpers of the observed-usage scan (cluster/jobs/observed/): ranges of presence, merged and split
by job runs, and job references parsed. No queries, easy to test on their own."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from cluster.jobs.models import JobSource

DIGITS = re.compile(r"[0-9]+")  # ASCII only: str.isdigit() takes other scripts' digits too
Range = tuple[datetime, datetime]
FAR_FUTURE = datetime.max.replace(tzinfo=UTC)


def merge_ranges(ranges: list[Range], gap: timedelta) -> list[Range]:
    """Union of ``ranges``, joining two that are at most ``gap`` apart; sorted."""
    merged: list[list[datetime]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1] + gap:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def split_by_runs(piece: Range, runs: list[tuple[int, datetime, datetime | None]], gap: timedelta):
    """Split ``piece`` over a job's runs ``(job id, start, end or None)``: returns ``(matched, rest)``,
    matched = ``[(job id, start, end)]`` clipped to each run it overlaps within ``gap``, rest = the
    ranges that are further than ``gap`` from every run."""
    matched, rest = [], [piece]
    for job_id, run_start, run_end in runs:
        lo, hi = run_start - gap, FAR_FUTURE if run_end is None else run_end + gap
        left = []
        for start, end in rest:
            if not (start < hi and end > lo):
                left.append((start, end))
                continue
            clipped = (max(start, run_start), end if run_end is None else min(end, run_end))
            if clipped[1] > clipped[0]:
                matched.append((job_id, *clipped))
            if start < lo:
                left.append((start, lo))
            if end > hi:
                left.append((hi, end))
        rest = left
    return matched, rest


def components(items: list[tuple], gap: timedelta) -> list[list[tuple]]:
    """Group ``(start, end, …)`` items whose ranges chain together with gaps of at most ``gap``."""
    groups: list[list[tuple]] = []
    group_end = None
    for item in sorted(items, key=lambda i: (i[0], i[1])):
        if groups and item[0] <= group_end + gap:
            groups[-1].append(item)
            group_end = max(group_end, item[1])
        else:
            groups.append([item])
            group_end = item[1]
    return groups


def parse_job_ref(ref: str | None) -> tuple[str, str] | None:
    """``(source, external id)`` of the job a ``job_ref`` names, or None when no scheduler job can match."""
    if ref and ref.startswith("job_") and DIGITS.fullmatch(ref[4:]):
        return JobSource.SLURM, ref[4:]
    if ref and ref.startswith("k8s-pod:") and len(ref) > 8:
        return JobSource.KUBERNETES, ref[8:]
    return None


# --- The scan ------------------------------------------------------------------------------------------
