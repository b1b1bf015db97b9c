"""What the demo history's jobs are (demo/history.py): each team's kinds of work, when they arrive over
the day and the week, and the profile that demo/telemetry.py turns into a utilization for every minute.

- **llm**: pretraining (whole H200 nodes for a day or more, ~95 % with a short dip at each hourly
  checkpoint after a quarter of an hour idle loading its checkpoint; one run in six hangs for its
  last 2–6 hours until it is cancelled: idle (a stalled data loader) or, for an even job number,
  spinning in a collective at 99–100 % duty cycle on a few SMs and idle power, see demo/telemetry.py)
  and fine-tunes (sft, dpo, reward model: 86–93 %, one in three idle for its first 20–60 minutes).
- **vision**: training at 62–90 % (one job in three idle for its first hours, waiting for its data;
  one in four idle for its last hours, done but not exited; one multi-GPU job in four busy on its
  first GPU only) and Jupyter sessions of about eight hours
  opened on weekday mornings on the interactive GPUs (:data:`INTERACTIVE`): under 5 % but for short
  bursts. One session was never closed (:data:`LONG_IDLE`): it holds an H100 idle for days. One H100
  trains a video model, job after job, at 97–100 % in every minute (:data:`ALWAYS_FULL`).
- **inference**: endpoints whose load follows the day (10 % at night and on weekends, up to 28 % in
  the afternoon) and batch evaluations at 15–28 % (one in four idle for its first half hour or more,
  waiting for its data).

A job that would arrive at night or on a weekend often waits for the next working morning instead,
so the cluster is busier from Monday to Friday by day. Bookings run what their purpose says.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from datetime import time as clock_time
from decimal import Decimal

from cluster.models import JobState
from core.timeutils import business_zone
from core.units import WHOLE_GPU_SHARE

MINUTE, HOUR = timedelta(minutes=1), timedelta(hours=1)
# Profiles: how a stretch of a GPU's time is busy, minute by minute (the codes demo/telemetry.py reads).
FREE, IDLE, FULL, PRETRAIN, TRAIN, NOTEBOOK, SERVE, BATCH = range(8)
MORNING, EVENING = 8, 18  # local hours: jobs arriving outside them (or on a weekend) may wait for a morning


@dataclass(frozen=True)
class Profile:
    kind: int = FREE
    level: float = 0.0  # the job's own utilization level, % (PRETRAIN, FULL, TRAIN, BATCH)
    memory: float = 0.0  # share of the GPU's memory it holds
    idle_minutes: int = 0  # idle at first (waiting for its data)
    idle_tail_minutes: int = 0  # idle at the end (done but not exited, or hung)
    first_gpu_only: bool = False  # a multi-GPU job that keeps only its first GPU busy: the others sit idle


@dataclass(frozen=True)
class Work:
    names: tuple[str, ...]
    weight: int
    sizes: tuple[int, ...]  # GPU counts
    hours: tuple[float, float, float]  # (min, mode, max) run time
    kind: int
    levels: tuple[float, float]  # the range a job's level is drawn from
    memory: tuple[float, float]
    waits: float  # chance that a job arriving at night or on a weekend waits for the next working morning


# team → (share of a GPU's time its jobs aim at, kinds of work)
TEAM_WORK = {
    "llm": (0.9, (
        Work(("pretrain-7b", "pretrain-13b"), 6, (8,), (16, 30, 60), PRETRAIN, (96.5, 98.0), (0.85, 0.95), 0.15),
        Work(("sft", "dpo", "reward-model"), 4, (2, 4, 8), (3, 8, 16), TRAIN, (86, 93), (0.6, 0.9), 0.5),
    )),
    "vision": (0.85, (
        Work(("detr-finetune", "yolo-sweep", "video-diffusion", "vit-pretrain"), 1, (1, 1, 1, 2, 2, 4), (3, 10, 30),
             TRAIN, (62, 90), (0.45, 0.9), 0.3),
    )),
    "inference": (0.8, (
        Work(("serve-llama-70b", "serve-qwen-32b"), 5, (1, 2), (12, 48, 120), SERVE, (0, 0), (0.6, 0.8), 0.2),
        Work(("eval-suite", "batch-embed", "load-test"), 4, (1, 2, 4), (2, 4, 12), BATCH, (15, 28), (0.35, 0.6), 0.5),
    )),
}
# vision training: one job in three idle for its first 1–4 hours, one in four for its last 1–3, one
# multi-GPU job in four busy on its first GPU only; pretraining: one run in six hangs (a collective
# that never returns) for its last 2–6 hours
IDLE_HEAD_ONE_IN, IDLE_TAIL_ONE_IN, FIRST_GPU_ONLY_ONE_IN, HANG_ONE_IN = 3, 4, 4, 6
BATCH_WAITS_ONE_IN = 4  # an inference batch job waits 30–120 minutes for its data first
# A booking's profile by its purpose (demo/bookings.py PLAN); one not named here holds its GPUs idle.
BOOKED_WORK = {
    "7B pretraining run": Profile(PRETRAIN, 96.0, 0.9), "resume pretraining": Profile(PRETRAIN, 96.0, 0.9),
    "notebook session": Profile(NOTEBOOK, 0, 0.3), "staging endpoints": Profile(SERVE, 0, 0.7),
    "reward model": Profile(TRAIN, 88.0, 0.7), "DPO run": Profile(TRAIN, 90.0, 0.8),
    "video model": Profile(TRAIN, 78.0, 0.8), "benchmark suite": Profile(BATCH, 24.0, 0.5),
}
# The interactive GPUs (host → indices): no batch jobs, Jupyter sessions of NOTEBOOKS' team on weekdays
# (each GPU, each weekday, with NOTEBOOKS' chance)
INTERACTIVE = {"gpu-h100-01": (6,), "gpu-h100-02": (5, 6, 7), "gpu-l40s-01": (6, 7), "gpu-l40s-02": (5, 6, 7)}
NOTEBOOKS = ("vision", 0.85)
# host, GPU index, team, job names: jobs back to back from the history's start, every minute ≥ 97 %
ALWAYS_FULL = ("gpu-h100-01", 5, "vision", ("video-diffusion-4k",))
# host, GPU index, team, job name, days ago (at most the history's length), local start hour: a Jupyter
# session holding the GPU idle from then to the history's end, when it is cancelled
LONG_IDLE = ("gpu-h100-01", 7, "vision", "jupyter", 6, 16)


@dataclass
class PlannedJob:
    team: str
    name: str
    gpus: list[int]  # empty: unplaced
    host: str
    pool: str
    model_id: int
    start: datetime
    end: datetime
    state: str = JobState.COMPLETED
    count: Decimal = Decimal(0)
    share: int = WHOLE_GPU_SHARE  # per GPU; unplaced: all of them
    profile: Profile = Profile()


def working_morning(moment: datetime, rng: random.Random) -> datetime:
    """A moment between 08:30 and 11:00 (local) of the first weekday morning that has not begun at ``moment``."""
    zone = business_zone()
    day = moment.astimezone(zone).date() + timedelta(days=moment.astimezone(zone).hour >= MORNING)
    while day.weekday() >= 5:
        day += timedelta(days=1)
    opening = datetime.combine(day, clock_time(8, 30), tzinfo=zone) + rng.randrange(0, 150) * MINUTE
    return opening.astimezone(moment.tzinfo)


def arrival(moment: datetime, work: Work, rng: random.Random) -> datetime:
    """When a job that could start at ``moment`` arrives: work arriving at night or on a weekend waits for
    the next working morning with the chance ``work.waits``."""
    local = moment.astimezone(business_zone())
    off_hours = local.weekday() >= 5 or not MORNING <= local.hour < EVENING
    return working_morning(moment, rng) if off_hours and rng.random() < work.waits else moment


def job_profile(work: Work, team: str, rng: random.Random, run: timedelta, gpus: int) -> Profile:
    """A job's profile: its level and memory, and how long it sits idle first and last (at most a third of
    its ``run`` each): see :data:`IDLE_HEAD_ONE_IN` and the module docstring."""
    longest = int(run / MINUTE) // 3
    head = tail = 0
    first_only = False
    if work.kind == PRETRAIN:
        head = rng.randrange(10, 25)  # loading the checkpoint, starting the collectives
        if rng.randrange(HANG_ONE_IN) == 0:
            tail = rng.randrange(120, 360)
    elif work.kind == TRAIN and team == "llm" and rng.randrange(3) == 0:
        head = rng.randrange(20, 60)
    elif work.kind == TRAIN and team == "vision":
        head = rng.randrange(60, 240) if rng.randrange(IDLE_HEAD_ONE_IN) == 0 else 0
        tail = rng.randrange(60, 180) if rng.randrange(IDLE_TAIL_ONE_IN) == 0 else 0
        first_only = gpus > 1 and rng.randrange(FIRST_GPU_ONLY_ONE_IN) == 0
    elif work.kind == BATCH and rng.randrange(BATCH_WAITS_ONE_IN) == 0:
        head = rng.randrange(30, 120)
    return Profile(work.kind, round(rng.uniform(*work.levels), 1), round(rng.uniform(*work.memory), 2),
                   min(head, longest), min(tail, longest), first_only)


def pack(gpus, teams, start, end, blocked, rng, *, busy_share=None, parent=None) -> list[PlannedJob]:
    """Jobs on ``gpus`` (one node, or one MIG slice) from ``start`` to ``end``: each on the GPUs free soonest,
    when it arrives (:func:`arrival`), followed by a pause sized so that the team's jobs fill about its
    share of the time; never on a blocked range (lo, hi, is_outage): a job that an outage cuts failed."""
    free = {g.pk: start + rng.randrange(0, 360) * MINUTE for g in gpus}
    out = []
    while min(free.values()) < end - HOUR:
        team = rng.choices([t for t, _w in teams], weights=[w for _t, w in teams])[0]
        share, kinds = TEAM_WORK[team]
        work = rng.choices(kinds, weights=[k.weight for k in kinds])[0]
        share = busy_share or share
        chosen = sorted(gpus, key=lambda g: (free[g.pk], g.pk))[:min(rng.choice(work.sizes), len(gpus))]
        begin = arrival(max(free[g.pk] for g in chosen), work, rng)
        low, mode, high = work.hours
        finish = min(begin + round(rng.triangular(low, high, mode) * 60) * MINUTE, end)
        state = rng.choices([JobState.COMPLETED, JobState.FAILED, JobState.PREEMPTED, JobState.CANCELLED],
                            weights=[88, 5, 4, 3])[0]
        for lo, hi, is_outage in sorted(b for g in chosen for b in blocked[g.pk]):
            if hi <= begin or lo >= finish:
                continue
            if lo <= begin:
                begin = finish = hi  # starts inside a blocked range: try again after it
                break
            finish, state = lo, (JobState.FAILED if is_outage else state)
        if finish - begin >= HOUR:
            profile = job_profile(work, team, rng, finish - begin, len(chosen))
            state = JobState.CANCELLED if work.kind == PRETRAIN and profile.idle_tail_minutes else state
            out.append(planned(team, rng.choice(work.names), chosen, begin, finish, state=state, parent=parent,
                               profile=profile))
            pause = (finish - begin) * (1 - share) / share * rng.uniform(0.2, 1.0)
        else:
            pause = timedelta(0)
        for gpu in chosen:
            free[gpu.pk] = max(free[gpu.pk], finish, begin) + pause // MINUTE * MINUTE
    return out


def planned(team, name, gpus, begin, finish, *, state=JobState.COMPLETED, parent=None, profile=Profile()) -> PlannedJob:
    """A job on ``gpus`` (of one node; MIG slices of ``parent``)."""
    return PlannedJob(
        team=team, name=name, gpus=[g.pk for g in gpus], host=gpus[0].node.hostname, pool=gpus[0].node.pool,
        model_id=(parent or gpus[0]).model.pk, start=begin, end=finish, state=state,
        count=Decimal(sum(g.share for g in gpus)) / WHOLE_GPU_SHARE, share=gpus[0].share, profile=profile,
    )


def always_full(gpu, start, end, blocked, rng) -> list[PlannedJob]:
    """:data:`ALWAYS_FULL`'s jobs: one after another from ``start`` to ``end``, no minute free between but
    the ``blocked`` ranges (lo, hi, is_outage) of its GPU."""
    _host, _index, team, names = ALWAYS_FULL
    out, begin = [], start
    for lo, hi, _outage in sorted([*blocked, (end, end, False)]):
        while begin < min(lo, end):
            finish = min(lo, end, begin + rng.randrange(12 * 60, 40 * 60) * MINUTE)
            out.append(planned(team, rng.choice(names), [gpu], begin, finish,
                               profile=Profile(FULL, 97.0, round(rng.uniform(0.8, 0.95), 2))))
            begin = finish
        begin = max(begin, hi)
    return out


def long_idle(gpu, begin, end, blocked) -> list[PlannedJob]:
    """:data:`LONG_IDLE`'s session: from ``begin`` to ``end`` (or the first blocked range), idle, then cancelled."""
    _host, _index, team, name, _ago, _hour = LONG_IDLE
    finish = min([end, *(lo for lo, hi, _outage in blocked if hi > begin)])
    finish = max(begin, finish)
    if finish - begin < HOUR:
        return []
    return [planned(team, name, [gpu], begin, finish, state=JobState.CANCELLED, profile=Profile(IDLE, 0, 0.35))]


def notebooks(gpus, blocked, start, end, rng) -> list[PlannedJob]:
    """Jupyter sessions on the interactive GPUs ``gpus`` (:data:`INTERACTIVE`): each weekday, most of them
    get one from a morning moment for 7.5–9 hours, where nothing is ``blocked`` (lo, hi, is_outage)."""
    team, chance = NOTEBOOKS
    out = []
    day = start
    while gpus and day < end:
        day = working_morning(day, rng)
        for gpu in gpus:
            lo = day + rng.randrange(0, 90) * MINUTE
            hi = min(end, lo + rng.randrange(450, 540) * MINUTE)
            if rng.random() < chance and hi - lo >= HOUR and not any(a < hi and lo < b for a, b, _ in blocked[gpu.pk]):
                out.append(planned(team, "jupyter", [gpu], lo, hi,
                                   profile=Profile(NOTEBOOK, 0, round(rng.uniform(0.2, 0.45), 2))))
    return out


def unplaced(gpus, start, end, rng) -> list[PlannedJob]:
    """sacct-like jobs: a GPU count and model, no node (about one every three days)."""
    models = sorted({g.model_id for g in gpus})
    out = []
    span_min = int((end - start) / MINUTE)
    for _n in range(max(2, span_min // (3 * 1440))):
        team = rng.choice(list(TEAM_WORK))
        work = TEAM_WORK[team][1][0]
        begin = start + rng.randrange(0, max(1, span_min - 120)) * MINUTE
        count = rng.choice((1, 2, 4))
        out.append(PlannedJob(
            team=team, name=rng.choice(work.names), gpus=[], host="", pool="", model_id=rng.choice(models),
            start=begin, end=min(end, begin + rng.randrange(120, 24 * 60) * MINUTE), count=Decimal(count),
            share=count * WHOLE_GPU_SHARE,
        ))
    return out
