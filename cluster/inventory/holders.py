"""Who holds each GPU now, and how busy it is (issue 14): the inventory and node pages' chips and rows.

A GPU is held by the jobs whose allocations cover ``now`` and by the active booking (or maintenance) hold
that covers it; a MIG instance is held on its own, apart from its parent GPU. Its utilization now is the
newest minute rollup with a utilization in the last :data:`RECENT` (never a raw sample): none is
"no data", never 0 %.

Scoped to the viewer (DESIGN.md §2): every role sees which team holds a GPU; the job or booking, its
user and project only where the viewer sees that team's rows (admin and finance: all teams). What the
viewer may not see is never read into a :class:`Holding`, so no template can show it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.postgres.fields.ranges import RangeEndsWith, RangeStartsWith
from django.db.models import FloatField, Q
from django.db.models.functions import Cast, Coalesce, Extract
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from cluster.choices import GpuStatus, NodeStatus
from cluster.models import Allocation, AllocationOrigin, Gpu, GpuHold, HoldKind, JobState, MinuteRollup
from core.choices import ColouredChoices
from core.queries import id_array, plain_rows
from teams.selectors import visible_team_ids

RECENT = timedelta(minutes=5)  # how old a minute rollup (or an observed process) may be and still be "now"


class HolderState(ColouredChoices):
    """What a GPU is doing now, as the chips colour it."""

    BUSY = "busy", _("Held, busy")
    IDLE = "idle", _("Held, idle")
    NO_DATA = "no_data", _("Held, no data")
    FREE = "free", _("Free")
    DOWN = "down", _("Down")

    @classmethod
    def _colours(cls):
        return {"busy": "green", "idle": "amber", "no_data": "nodata", "free": "free", "down": "red"}


class HoldingKind:
    JOB, BOOKING, MAINTENANCE = "job", "booking", "maintenance"


@dataclass(frozen=True)
class Holding:
    """One job or hold on a GPU now. ``visible`` False: only the team is known to the viewer, and the
    other fields are empty (``object_id`` None)."""

    kind: str
    team: str
    visible: bool
    object_id: int | None = None
    label: str = ""  # a job's id and name, or a booking's number and purpose
    user: str = ""
    project: str = ""
    since: datetime | None = None

    @property
    def is_job(self) -> bool:
        return self.kind == HoldingKind.JOB

    @property
    def is_booking(self) -> bool:
        return self.kind == HoldingKind.BOOKING


@dataclass(frozen=True)
class GpuNow:
    """A GPU's holders, utilization and state at one moment."""

    state: HolderState
    holdings: tuple[Holding, ...]
    util_pct: float | None  # None: no measurement in the last RECENT (shown as "no data", never 0 %)
    util_at: datetime | None  # the minute the utilization is from

    @property
    def state_colour(self) -> str:
        return self.state.colour

    @property
    def state_label(self) -> str:
        return self.state.label

    @property
    def teams(self) -> list[str]:
        """The holding teams' names, each once, in holding order."""
        return list(dict.fromkeys(h.team for h in self.holdings if h.team))


def gpu_state(*, down: bool, held: bool, util_pct: float | None, idle_threshold_pct: float) -> HolderState:
    """Down beats everything; a free GPU is free whatever it shows; a held one is busy at or above the idle
    threshold (DESIGN.md §4), idle below it, and "no data" without a measurement (never idle)."""
    if down:
        return HolderState.DOWN
    if not held:
        return HolderState.FREE
    if util_pct is None:
        return HolderState.NO_DATA
    return HolderState.BUSY if util_pct >= idle_threshold_pct else HolderState.IDLE


def current_utilization(gpu_ids: Sequence[int], *, now: datetime) -> dict[int, tuple[float, datetime]]:
    """GPU id → (utilization %, minute) of its newest minute rollup with a utilization in
    ``(now - RECENT, now]``; GPUs without one are absent. One query."""
    rows = (
        MinuteRollup.objects.filter(
            gpu_id__in=gpu_ids, bucket__gt=now - RECENT, bucket__lte=now, util_mean__isnull=False
        )
        .order_by("gpu_id", "-bucket")
        .distinct("gpu_id")
        .values_list("gpu_id", "util_mean", "bucket")
    )
    return {gpu_id: (util, bucket) for gpu_id, util, bucket in rows}


def job_label(external_id: str, name: str) -> str:
    """How a job reads wherever it is listed: its id, and its name where it has another."""
    return f"{external_id} · {name}" if name and name != external_id else external_id


def booking_label(booking_id: int, note: str) -> str:
    """How a booking reads: its number, and its purpose where it has one."""
    return f"#{booking_id}" + (f" · {note}" if note else "")


def _sees(team_id: int | None, visible: frozenset[int] | None) -> bool:
    return visible is None or (team_id is not None and team_id in visible)


def current_holdings(user, gpu_ids: Sequence[int], *, now: datetime) -> dict[int, list[Holding]]:
    """GPU id → what holds it at ``now``, as ``user`` may see it: jobs first (by start), then holds.

    A job holds a GPU while an allocation covers ``now`` (``start <= now < end``, or no end yet); an
    observed allocation ends where its process was last seen, so a running observed job still holds the
    GPU while it was seen in the last :data:`RECENT`. Three queries at most (the viewer's teams,
    allocations, holds)."""
    visible = visible_team_ids(user)
    still_seen = Q(
        origin=AllocationOrigin.OBSERVED, end__gte=now - RECENT, job__state=JobState.RUNNING,
        job__end_time__isnull=True,
    )
    allocations = (
        Allocation.objects.filter(gpu_id__in=gpu_ids, start__lte=now)
        .filter(Q(end__isnull=True) | Q(end__gt=now) | still_seen)
        .order_by("gpu_id", "start", "job_id")
        .values_list(
            "gpu_id", "job_id", "job__team_id", "job__team__name", "job__external_id", "job__name", "job__user",
            "job__project__name", "start",
        )
    )
    held: dict[int, list[Holding]] = defaultdict(list)
    seen: set[tuple[int, int]] = set()
    for gpu_id, job_id, team_id, team, external_id, name, job_user, project, start in allocations:
        if (gpu_id, job_id) in seen:  # a job's scheduler and observed allocations are one holding
            continue
        seen.add((gpu_id, job_id))
        team = team or gettext("Unattributed")
        if _sees(team_id, visible):
            held[gpu_id].append(Holding(
                HoldingKind.JOB, team, True, job_id, job_label(external_id, name), job_user, project or "", start,
            ))
        else:
            held[gpu_id].append(Holding(HoldingKind.JOB, team, False))
    holds = (
        GpuHold.objects.active()
        .filter(gpu_id__in=gpu_ids, during__contains=now)
        .order_by("gpu_id", "during")
        .values_list(
            "gpu_id", "kind", "booking_id", "team_id", "team__name", "booker__username", "project__name",
            "booking__note", "during",
        )
    )
    for gpu_id, kind, booking_id, team_id, team, booker, project, note, during in holds:
        if kind == HoldKind.MAINTENANCE:
            held[gpu_id].append(Holding(HoldingKind.MAINTENANCE, "", True, label=str(HoldKind.MAINTENANCE.label)))
        elif _sees(team_id, visible):
            held[gpu_id].append(Holding(
                HoldingKind.BOOKING, team, True, booking_id, booking_label(booking_id, note), booker or "", project or "", during.lower,
            ))
        else:
            held[gpu_id].append(Holding(HoldingKind.BOOKING, team, False))
    return dict(held)


def node_gpus(nodes: Iterable) -> list[tuple[Gpu, str]]:
    """(GPU, its node's status) of every whole GPU and MIG instance of ``nodes`` fetched by
    ``nodes_with_gpus`` (no query: the MIG instances are prefetched)."""
    return [
        (gpu, node.status)
        for node in nodes for whole in node.whole_gpus for gpu in (whole, *whole.mig_instances.all())
    ]


def gpus_now(user, gpus: Sequence[tuple[Gpu, str]], *, now: datetime) -> dict[int, GpuNow]:
    """GPU id → :class:`GpuNow` at ``now`` for ``gpus`` ((GPU, node status) pairs, see :func:`node_gpus`),
    as ``user`` may see it, in four queries at most whatever the number of GPUs. A GPU is down when its
    node is (DESIGN.md §4: unreachable, in maintenance…), when it is not active, or under maintenance."""
    ids = [gpu.pk for gpu, _status in gpus]
    holdings = current_holdings(user, ids, now=now)
    utilization = current_utilization(ids, now=now)
    threshold = settings.CARDHOUR_IDLE_THRESHOLD_PCT
    parents = {gpu.pk: gpu for gpu, _status in gpus}
    result = {}
    for gpu, node_status in gpus:
        held = tuple(holdings.get(gpu.pk, ()))
        parent = parents.get(gpu.mig_parent_id)
        down = (
            node_status in NodeStatus.down()
            or gpu.status != GpuStatus.ACTIVE
            or (parent is not None and parent.status != GpuStatus.ACTIVE)
            or any(h.kind == HoldingKind.MAINTENANCE for h in held)
        )
        util, at = utilization.get(gpu.pk, (None, None))
        state = gpu_state(
            down=down, held=any(h.kind != HoldingKind.MAINTENANCE for h in held), util_pct=util,
            idle_threshold_pct=threshold,
        )
        result[gpu.pk] = GpuNow(state, held, util, at)
    return result


def attach_holders(user, nodes, *, now: datetime) -> None:
    """Give every whole GPU of ``nodes`` its ``now`` (:class:`~cluster.inventory.holders.GpuNow`, as the
    viewer may see it) and its ``slices`` (MIG instances, each with its own ``now``): four queries."""
    by_gpu = gpus_now(user, node_gpus(nodes), now=now)
    for node in nodes:
        for gpu in node.whole_gpus:
            gpu.now = by_gpu[gpu.pk]
            gpu.slices = list(gpu.mig_instances.all())
            for mig in gpu.slices:
                mig.now = by_gpu[mig.pk]


def _epoch(field: str):
    return Cast(Extract(field, "epoch"), FloatField())


def visible_spans_between(user, gpu_ids: Sequence[int], *, start: datetime, end: datetime,
                          now: datetime) -> list[tuple[int, float, float, str]]:
    """The jobs and bookings that held the physical GPUs ``gpu_ids`` within ``[start, end)`` whose team
    ``user`` sees in full, for the board's heatmap: (GPU id, start, end, label) with times in epoch seconds,
    jobs by start then bookings by start (a MIG slice's holding counts on its GPU; a job still running
    holds up to ``now``). Two queries, read as plain tuples: a day of 1,000 GPUs has thousands of
    allocations."""
    visible = visible_team_ids(user)
    ids = id_array(gpu_ids)
    allocations = Allocation.objects.filter(Q(gpu_id__in=ids) | Q(gpu__mig_parent_id__in=ids), start__lt=end)
    holds = GpuHold.objects.active().filter(gpu_id__in=ids, during__overlap=(start, end), kind=HoldKind.BOOKING)
    if visible is not None:
        allocations = allocations.filter(job__team_id__in=visible)
        holds = holds.filter(team_id__in=visible)
    allocations = (
        allocations.filter(Q(end__isnull=True) | Q(end__gt=start))
        .annotate(lo=_epoch("start"), hi=_epoch("end"), physical=Coalesce("gpu__mig_parent_id", "gpu_id"))
        .order_by("start", "job_id")
        .values_list("physical", "job_id", "job__external_id", "job__name", "lo", "hi")
    )
    now_s = now.timestamp()
    out: list[tuple[int, float, float, str]] = []
    seen: set[tuple] = set()
    labels: dict[int, str] = {}
    for physical, job_id, external_id, name, lo, hi in plain_rows(allocations):
        key = (physical, job_id, lo)
        if key in seen:  # a job's scheduler and observed allocations are one holding
            continue
        seen.add(key)
        label = labels.get(job_id) or labels.setdefault(job_id, job_label(external_id, name))
        out.append((physical, lo, now_s if hi is None else hi, label))
    holds = (
        holds.annotate(lo=_epoch(RangeStartsWith("during")), hi=_epoch(RangeEndsWith("during"))).order_by("during")
        .values_list("gpu_id", "booking_id", "booking__note", "lo", "hi")
    )
    for gpu_id, booking_id, note, lo, hi in plain_rows(holds):
        out.append((gpu_id, lo, hi, booking_label(booking_id, note)))
    return out
