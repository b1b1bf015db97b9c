"""Benchmark of ``import_jobs`` (the generic jobs CSV through the set-based writer): a first import of
``n`` new jobs, the same file again (all unchanged), and a file in which a tenth of the jobs changed.
Run by ``make bench`` (bench/__main__.py) against a scratch database; it deletes the jobs it made."""

from __future__ import annotations

import csv
import random
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from django.db import connection
from django.utils import timezone

from cluster.jobs.imports.jobs_csv import import_jobs_csv
from cluster.models import Allocation, Gpu, GpuModel, Job, JobSource, Node
from teams.models import Project, Team

NODES, GPUS_PER_NODE, TEAMS = 32, 8, 4
HEADER = ("job_id", "user", "team", "project", "gpu_count", "gpu_model", "submit_time", "start_time", "end_time",
          "state", "node", "gpu_indices", "priority", "estimated_card_hours")
JOB = Job._meta.db_table
ALLOCATION = Allocation._meta.db_table


def _cluster() -> None:
    model, _ = GpuModel.objects.get_or_create(name="NVIDIA H200", defaults={"short_name": "H200", "memory_mib": 143771})
    for n in range(NODES):
        node, _ = Node.objects.get_or_create(hostname=f"bench-job-{n:02d}", defaults={"pool": "bench"})
        existing = set(Gpu.objects.filter(node=node).values_list("index", flat=True))
        Gpu.objects.bulk_create([
            Gpu(node=node, index=i, uuid=f"GPU-bench-job-{n:02d}-{i}", model=model, memory_mib=model.memory_mib)
            for i in range(GPUS_PER_NODE) if i not in existing
        ])
    for t in range(TEAMS):
        team, _ = Team.objects.get_or_create(slug=f"bench-{t}", defaults={"name": f"Bench {t}", "cost_centre": f"B{t}"})
        Project.objects.get_or_create(team=team, slug="main", defaults={"name": "Main"})


def _rows(n: int, *, month_start: datetime, changed_every: int = 0) -> list[tuple]:
    """``n`` jobs over the month from ``month_start``: half placed on a node's GPUs, half unplaced (a tenth of
    those fractional); every ``changed_every``-th job, if set, has another priority and (when it ended)
    ended an hour later."""
    rng = random.Random(11)
    rows = []
    for i in range(n):
        submit = month_start + timedelta(seconds=rng.randrange(30 * 86400))
        start = submit + timedelta(seconds=rng.randrange(3600))
        end = start + timedelta(seconds=rng.randrange(60, 86400))
        state = rng.choice(("completed", "completed", "completed", "failed", "cancelled", "running"))
        placed = i % 2 == 0
        count = rng.choice((1, 2, 4, 8)) if placed or i % 10 != 1 else 0.5
        priority = rng.randrange(1000)
        if changed_every and i % changed_every == 0:
            end, priority = end + timedelta(hours=1), priority + 1
        indices = ",".join(map(str, range(count))) if placed else ""
        rows.append((
            f"bench-{i}", f"user{i % 97}", f"bench-{i % TEAMS}", "main" if i % 3 else "", count, "H200",
            submit.isoformat(), start.isoformat(), "" if state == "running" else end.isoformat(), state,
            f"bench-job-{i % NODES:02d}" if placed else "", indices, priority, "",
        ))
    return rows


def _write(path: Path, rows: list[tuple]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        writer.writerows(rows)
    return path


def _timed(path: Path) -> tuple[float, object]:
    started = time.perf_counter()
    report = import_jobs_csv(path)
    return time.perf_counter() - started, report


def _clear() -> None:
    """Remove the bench's jobs in two statements (the ORM's cascade would fetch every allocation first)."""
    jobs = f"SELECT id FROM {JOB} WHERE source = %s AND external_id LIKE %s"  # noqa: S608 (a constant table)
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {ALLOCATION} WHERE job_id IN ({jobs})", [JobSource.CSV, "bench-%"])  # noqa: S608
        cursor.execute(f"DELETE FROM {JOB} WHERE source = %s AND external_id LIKE %s", [JobSource.CSV, "bench-%"])  # noqa: S608


def bench_import_jobs(n: int = 100_000) -> dict:
    _cluster()
    _clear()
    with tempfile.TemporaryDirectory(prefix="cardhour-bench-") as tmp:
        # The month before today: job times may lie at most a day ahead of the clock (core.timewindow).
        month_start = (timezone.now() - timedelta(days=32)).replace(hour=0, minute=0, second=0, microsecond=0)
        first = _write(Path(tmp) / "jobs.csv", _rows(n, month_start=month_start))
        changed = _write(Path(tmp) / "jobs-changed.csv", _rows(n, month_start=month_start, changed_every=10))
        first_s, first_report = _timed(first)
        again_s, again_report = _timed(first)
        changed_s, changed_report = _timed(changed)
    assert (first_report.imported, again_report.unchanged) == (n, n), (first_report.summary(), again_report.summary())
    assert changed_report.updated == len(range(0, n, 10)), changed_report.summary()
    _clear()
    return {
        "jobs": n, "first_s": first_s, "first_rows_per_s": n / first_s,
        "again_s": again_s, "again_rows_per_s": n / again_s,
        "tenth_changed_s": changed_s, "tenth_changed_rows_per_s": n / changed_s,
    }
