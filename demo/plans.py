"""The demo's plan against actual (issue 19): estimates, data readiness, queued and running jobs, so each
team's plan page (/teams/<slug>/plan/) tells a story.

- The history's finished jobs get an estimate from what they held: most within ±15 %, one in ten far under
  what it used (it ran twice its estimate: over), one in ten twice what it used (under), one in ten none.
- One in thirteen history jobs of over an hour held its GPUs a while before its data was ready
  (``data_ready_at`` a sixth of its run after its start).
- Each team has two queued jobs (priorities, estimates, one whose data is not ready yet) and two running ones
  on GPUs whose placement the scheduler did not report (unplaced): one already past its estimate, one
  waiting for its data (``data_ready = false``).

Idempotent: the queued and running jobs are ``plan-<team>-<n>``; estimates are set only where none is.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

from django.db import connection, transaction

from cluster.models import Allocation, GpuModel, Job, JobSource, JobState, TeamIdentity
from core.units import TICKS_PER_GPU_SECOND
from teams.models import Team

# team slug → (model short name, [(n, name, state, gpus, hours started ago (None: queued), estimate, priority,
# data ready)])
OPEN_JOBS = {
    "llm": ("H200", [
        (1, "llm-13b-resume", JobState.PENDING, 8, None, "640", 4800, True),
        (2, "sft-sweep-lr", JobState.PENDING, 2, None, "48", 3100, False),
        (3, "llm-7b-phase2", JobState.RUNNING, 4, 30, "60", 4500, True),  # 120 held of 60: over
        (4, "rlhf-reward-model", JobState.RUNNING, 2, 3, "40", 3900, False),  # GPUs held, data not ready
    ]),
    "vision": ("H100", [
        (1, "detector-distill", JobState.PENDING, 4, None, "96", 2600, True),
        (2, "video-gen-eval", JobState.PENDING, 1, None, "6", 1500, None),
        (3, "segmentation-ft", JobState.RUNNING, 2, 10, "12", 2900, True),  # 20 of 12: over
        (4, "video-gen-pretrain", JobState.RUNNING, 2, 2, "200", 3500, False),
    ]),
    "inference": ("L40S", [
        (1, "eval-harness-nightly", JobState.PENDING, 1, None, "4", 2000, True),
        (2, "quantize-int4", JobState.PENDING, 1, None, "3", 1200, None),
        (3, "load-test-serving", JobState.RUNNING, 1, 6, "2", 2400, True),  # 6 of 2: over
        (4, "embedding-refresh", JobState.RUNNING, 1, 1, "8", 1800, False),
    ]),
}

# The n-th job of each team (by id) picks its kind by n, so every team's month has each kind.
_RANKED = """(SELECT id, row_number() OVER (PARTITION BY team_id ORDER BY id) AS n FROM {jobs}
    WHERE source = 'slurm' AND team_id IS NOT NULL AND start_time IS NOT NULL AND end_time > start_time) ranked"""
_ESTIMATES_SQL = """
UPDATE {jobs} j SET estimated_card_hours = round((j.gpu_count * extract(epoch FROM j.end_time - j.start_time) / 3600
    * CASE ranked.n % 10 WHEN 0 THEN 0.5 WHEN 1 THEN 2.0 ELSE 0.88 + (ranked.n % 7) * 0.045 END)::numeric, 1)
FROM """ + _RANKED + """
WHERE j.id = ranked.id AND j.estimated_card_hours IS NULL AND j.gpu_count > 0 AND ranked.n % 10 <> 2
"""
_DATA_READY_SQL = """
UPDATE {jobs} j SET data_ready = true, data_ready_at = j.start_time + (j.end_time - j.start_time) / 6
FROM """ + _RANKED + """
WHERE j.id = ranked.id AND j.data_ready_at IS NULL AND ranked.n % 13 = 5
  AND j.end_time - j.start_time > interval '1 hour'
"""


@transaction.atomic
def load_demo_plans(*, now: datetime) -> dict:
    """Estimates and data readiness on the history's jobs, and each team's queued and running jobs."""
    jobs = Job._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(_ESTIMATES_SQL.format(jobs=jobs))
        estimated = cursor.rowcount
        cursor.execute(_DATA_READY_SQL.format(jobs=jobs))
        waited = cursor.rowcount
    made = 0
    teams = {team.slug: team for team in Team.objects.filter(slug__in=OPEN_JOBS)}
    for slug, (model_name, rows) in OPEN_JOBS.items():
        team, model = teams.get(slug), GpuModel.objects.filter(short_name=model_name).first()
        if team is None or model is None:
            continue
        identity = TeamIdentity.objects.filter(team=team).order_by("name").first()
        for n, name, state, gpus, hours_ago, estimate, priority, ready in rows:
            external_id = f"plan-{slug}-{n}"
            if Job.objects.filter(source=JobSource.SLURM, external_id=external_id).exists():
                continue
            start = None if hours_ago is None else now - timedelta(hours=hours_ago)
            job = Job.objects.create(
                source=JobSource.SLURM, external_id=external_id, name=name, team=team,
                user=identity.name if identity else "", project_id=identity.project_id if identity else None,
                state=state, priority=priority, gpu_count=Decimal(gpus), gpu_model=model,
                estimated_card_hours=Decimal(estimate), data_ready=ready,
                submit_time=(start or now) - timedelta(minutes=20 + 7 * n), start_time=start,
            )
            if start is not None:
                Allocation.objects.create(job=job, gpu=None, gpu_model=model, share=gpus * TICKS_PER_GPU_SECOND,
                                          start=start, end=None)
            made += 1
    return {"estimated": estimated, "waited_for_data": waited, "open_jobs": made}
