"""The booking calendar's week (DESIGN.md §2, §6): which GPU is held when, and by whom as far as the viewer
may know. One read (:func:`calendar_for_week`, three queries whatever the cluster's size) feeds one pure
shaping function (:func:`shape_calendar`) that turns rows into lanes of positioned blocks.

Another team's booking is labelled with the team's name only: no booker, project or note reaches the
page, so the shaping never reads them for such a hold.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo

from django.db.models import Q
from django.utils import timezone
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from cluster.choices import GpuStatus, NodeStatus
from cluster.models import Gpu, GpuHold, HoldKind, NodeStatusPeriod
from core.timeutils import week_days
from teams.models import Membership

GROUP_BY_NODE, GROUP_BY_MODEL = "node", "model"
PERCENT_PLACES = 4


class BlockKind:
    """What a block on a lane is, its legend label and its CSS class (``block-<value>``)."""

    MINE, TEAM, OTHER, MAINTENANCE, DOWN = "mine", "team", "other", "maintenance", "down"
    LABELS = {
        MINE: _("Mine"), TEAM: _("My team's"), OTHER: _("Other teams'"), MAINTENANCE: _("Maintenance"),
        DOWN: _("Down"),
    }


@dataclass(frozen=True)
class LegendEntry:
    kind: str
    label: str


def legend() -> list[LegendEntry]:
    return [LegendEntry(kind, label) for kind, label in BlockKind.LABELS.items()]


# --- rows as read from the database (plain values, so the shaping needs no ORM)


@dataclass(frozen=True)
class GpuRow:
    gpu_id: int
    node_id: int
    hostname: str
    index: int
    model: str
    node_status: str


@dataclass(frozen=True)
class HoldRow:
    gpu_id: int
    start: datetime
    end: datetime
    kind: str  # HoldKind
    booking_id: int | None = None
    team_id: int | None = None
    team_name: str = ""
    booker_id: int | None = None
    booker_name: str = ""
    project_name: str = ""


@dataclass(frozen=True)
class DownRow:
    node_id: int
    start: datetime
    end: datetime | None  # None: still open
    status: str  # NodeStatus


# --- what the page draws


@dataclass(frozen=True)
class Block:
    """A coloured bar on a lane: ``left_pct``/``width_pct`` of the week, clipped to it; ``start``/``end``
    are the hold's own times; ``booking_id`` only where the viewer may open the booking."""

    kind: str
    label: str
    left_pct: float
    width_pct: float
    start: datetime
    end: datetime
    booking_id: int | None = None


@dataclass(frozen=True)
class Lane:
    """One whole GPU's week."""

    gpu_id: int
    name: str  # "h200-a/0"
    hostname: str
    model: str
    bookable: bool
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class LaneGroup:
    """A heading row (a node, or a GPU model) and its lanes."""

    heading: str
    key: str  # the hostname or the model's short name, for the "Book" link
    status: str  # the node's status when grouped by node, else ""
    bookable: bool
    lanes: tuple[Lane, ...]

    @property
    def status_label(self) -> str:
        return NodeStatus(self.status).label if self.status else ""

    @property
    def status_colour(self) -> str:
        return NodeStatus(self.status).colour if self.status else ""


@dataclass(frozen=True)
class DayColumn:
    day: date
    left_pct: float
    width_pct: float


@dataclass(frozen=True)
class CalendarWeek:
    start: datetime
    end: datetime
    days: tuple[DayColumn, ...]
    groups: tuple[LaneGroup, ...]
    now_pct: float | None  # where the "now" line is, None outside the week


def week_bounds(day: date, zone: tzinfo) -> tuple[datetime, datetime]:
    """Monday 00:00 of ``day``'s week to the next Monday 00:00, in ``zone`` (aware; DST makes it 167 or 169 h)."""
    monday = week_days(day)[0]
    return _midnight(monday, zone), _midnight(monday + timedelta(days=7), zone)


def _midnight(day: date, zone: tzinfo) -> datetime:
    # In UTC: Python subtracts two datetimes of one zone as wall-clock times, ignoring a DST change.
    return timezone.make_aware(datetime.combine(day, time.min), zone).astimezone(UTC)


def position(start: datetime, end: datetime, week_start: datetime, week_end: datetime) -> tuple[float, float] | None:
    """(left %, width %) of ``[start, end)`` clipped to the week, or None when it misses the week."""
    start, end, week_start, week_end = (moment.astimezone(UTC) for moment in (start, end, week_start, week_end))
    lo, hi = max(start, week_start), min(end, week_end)
    if hi <= lo:
        return None
    week = (week_end - week_start).total_seconds()
    left = (lo - week_start).total_seconds() / week * 100
    width = (hi - lo).total_seconds() / week * 100
    return round(left, PERCENT_PLACES), round(width, PERCENT_PLACES)


def _hold_block(hold: HoldRow, *, viewer_id: int, viewer_team_ids: frozenset[int]) -> tuple[str, str, int | None]:
    """(kind, label, booking id shown) of a hold as the viewer may see it."""
    if hold.kind == HoldKind.MAINTENANCE:
        return BlockKind.MAINTENANCE, str(BlockKind.LABELS[BlockKind.MAINTENANCE]), None
    if hold.booker_id == viewer_id:
        label = gettext("Mine") + (f" · {hold.project_name}" if hold.project_name else "")
        return BlockKind.MINE, label, hold.booking_id
    if hold.team_id in viewer_team_ids:
        return BlockKind.TEAM, hold.booker_name, hold.booking_id
    return BlockKind.OTHER, hold.team_name, None


def shape_calendar(
    *, week_start: datetime, week_end: datetime, gpus: Sequence[GpuRow], holds: Iterable[HoldRow],
    downs: Iterable[DownRow], viewer_id: int, viewer_team_ids: Iterable[int], group: str, now: datetime,
    zone: tzinfo,
) -> CalendarWeek:
    """Lanes (one per GPU, grouped by node or by model) with their blocks: holds classified for the viewer,
    and down periods; a node whose status is maintenance or retired is down all week. A node's maintenance
    (its status) is drawn only where no maintenance window of the GPU draws it already: an admin who puts
    a node in maintenance for its planned window would otherwise see that window twice."""
    team_ids = frozenset(viewer_team_ids)
    blocks: dict[int, list[Block]] = defaultdict(list)
    planned: dict[int, list[tuple[datetime, datetime]]] = defaultdict(list)  # GPU → its maintenance windows
    known = {gpu.gpu_id for gpu in gpus}
    for hold in holds:
        placed = position(hold.start, hold.end, week_start, week_end)
        if hold.gpu_id not in known or placed is None:
            continue
        kind, label, booking_id = _hold_block(hold, viewer_id=viewer_id, viewer_team_ids=team_ids)
        blocks[hold.gpu_id].append(Block(kind, label, *placed, hold.start, hold.end, booking_id))
        if hold.kind == HoldKind.MAINTENANCE:
            planned[hold.gpu_id].append((hold.start, hold.end))
    node_downs: dict[int, list[tuple[str, datetime, datetime]]] = defaultdict(list)
    for down in downs:
        end = down.end if down.end is not None else max(now, down.start)
        node_downs[down.node_id].append((down.status, down.start, end))
    lanes = []
    for gpu in gpus:
        bookable = gpu.node_status not in NodeStatus.set_by_admins()
        # Taken out of service by an admin: down all week, whatever its past periods say.
        periods = node_downs.get(gpu.node_id, []) if bookable else [(gpu.node_status, week_start, week_end)]
        down_blocks = [
            Block(BlockKind.DOWN, str(NodeStatus(status).label), *placed, lo, hi)
            for status, start, end in periods
            for lo, hi in (uncovered(start, end, planned[gpu.gpu_id]) if status == NodeStatus.MAINTENANCE
                           else [(start, end)])
            if (placed := position(lo, hi, week_start, week_end)) is not None
        ]
        lane_blocks = sorted([*down_blocks, *blocks.get(gpu.gpu_id, [])], key=lambda b: (b.left_pct, b.kind))
        lanes.append(Lane(
            gpu.gpu_id, f"{gpu.hostname}/{gpu.index}", gpu.hostname, gpu.model, bookable, tuple(lane_blocks),
        ))
    return CalendarWeek(
        start=week_start, end=week_end, days=_days(week_start, week_end, zone),
        groups=_group(lanes, gpus, group), now_pct=_now_pct(now, week_start, week_end),
    )


def uncovered(start: datetime, end: datetime, covers: Iterable[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    """The parts of ``[start, end)`` that no ``[lo, hi)`` of ``covers`` overlaps, in order."""
    pieces, at = [], start
    for lo, hi in sorted(covers):
        if lo >= end:
            break
        if lo > at:
            pieces.append((at, lo))
        at = max(at, hi)
    if at < end:
        pieces.append((at, end))
    return pieces


def _days(week_start: datetime, week_end: datetime, zone: tzinfo) -> tuple[DayColumn, ...]:
    first = timezone.localtime(week_start, zone).date()
    columns = []
    for offset in range(7):
        day = first + timedelta(days=offset)
        columns.append(DayColumn(day, *position(_midnight(day, zone), _midnight(day + timedelta(days=1), zone),
                                                week_start, week_end)))
    return tuple(columns)


def _now_pct(now: datetime, week_start: datetime, week_end: datetime) -> float | None:
    if not week_start <= now < week_end:
        return None
    return position(week_start, now, week_start, week_end)[1]


def _group(lanes: list[Lane], gpus: Sequence[GpuRow], group: str) -> tuple[LaneGroup, ...]:
    by_key: dict[str, list[Lane]] = defaultdict(list)
    status_of = {gpu.hostname: gpu.node_status for gpu in gpus}
    for lane in lanes:
        by_key[lane.model if group == GROUP_BY_MODEL else lane.hostname].append(lane)
    groups = []
    for key in sorted(by_key):
        members = tuple(sorted(by_key[key], key=lambda lane: (lane.hostname, lane.name)))
        if group == GROUP_BY_MODEL:
            groups.append(LaneGroup(key, key, "", any(lane.bookable for lane in members), members))
        else:
            models = ", ".join(sorted({lane.model for lane in members}))
            groups.append(LaneGroup(
                f"{key} · {models}", key, status_of[key], any(lane.bookable for lane in members), members,
            ))
    return tuple(groups)


# --- the read


def calendar_gpus():
    """The calendar's lanes: bookable whole GPUs, and those of nodes in maintenance (drawn as down)."""
    whole = Q(mig_parent__isnull=True, status=GpuStatus.ACTIVE)
    return Gpu.objects.filter(whole & ~Q(node__status=NodeStatus.RETIRED))


def calendar_for_week(user, *, week_start: datetime, week_end: datetime, group: str, now: datetime,
                      zone: tzinfo) -> CalendarWeek:
    """The week as ``user`` sees it: four queries (the viewer's teams, GPUs, holds, down periods)."""
    team_ids = list(Membership.objects.filter(user=user).values_list("team_id", flat=True))
    gpus = [
        GpuRow(*row) for row in calendar_gpus().order_by("node__hostname", "index").values_list(
            "pk", "node_id", "node__hostname", "index", "model__short_name", "node__status",
        )
    ]
    hold_rows = GpuHold.objects.overlapping(week_start, week_end).values_list(
        "gpu_id", "during", "kind", "booking_id", "team_id", "team__name", "booker_id", "booker__username",
        "project__name",
    )
    holds = [
        HoldRow(gpu_id, during.lower, during.upper, kind, booking_id, team_id, team_name or "", booker_id,
                booker_name or "", project_name or "")
        for gpu_id, during, kind, booking_id, team_id, team_name, booker_id, booker_name, project_name in hold_rows
    ]
    downs = [
        DownRow(*row) for row in NodeStatusPeriod.objects.filter(
            Q(ended_at__isnull=True) | Q(ended_at__gt=week_start), status__in=NodeStatus.down(),
            started_at__lt=week_end,
        ).values_list("node_id", "started_at", "ended_at", "status")
    ]
    return shape_calendar(
        week_start=week_start, week_end=week_end, gpus=gpus, holds=holds, downs=downs, viewer_id=user.pk,
        viewer_team_ids=team_ids, group=group, now=now, zone=zone,
    )
