"""Guaranteed shares (issue 19): a team's GPUs of a model that other teams' bookings may not take.

The rule, for one GPU model over a window cut into segments where nothing changes: a team's guarantee
*reserves* what it does not hold yet, ``max(0, guaranteed − held)``, while the guarantee applies. A
booking of ``count`` GPUs by team X is refused in a segment when

- part of it lies beyond X's own unused guarantee (``count > max(0, guaranteed_X − held_X)``), and
- the GPUs left free after it would be fewer than the other teams' reservations
  (``free − count < Σ reserved of the others``).

So the part of a request within a team's own guarantee is never refused for a guarantee (only for GPUs
that are not free), and a booking beyond it never takes the last GPUs another guarantee still reserves.
As long as the guarantees of a model add up to no more than its GPUs and every booking passes this rule,
``free ≥ Σ reserved`` holds at every moment, hence each team can always book up to its guarantee
(property-tested). Bookings made before a guarantee existed are never moved or ended by it.

The first part is pure (epoch seconds in, no ORM), the second reads a model's GPUs, holds and guarantees
for the booking services, which call it after taking the writers' turn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from itertools import pairwise

from django.utils.translation import gettext as _

from cluster.bookings.holds import RangeBoundEpoch, bookable_gpus, local_span
from cluster.models import GpuHold, GuaranteeDays, TeamGuarantee
from core.timeutils import business_zone

# --- the pure rule ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Share:
    """A guarantee as the rule reads it: ``active`` are the [lo, hi) epoch-second ranges where it applies."""

    guarantee_id: int
    team_id: int
    gpus: int
    active: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Held:
    """One GPU of the model held over [lo, hi) epoch seconds; ``team_id`` None for maintenance."""

    lo: int
    hi: int
    team_id: int | None


@dataclass(frozen=True)
class Segment:
    """[lo, hi) in which the holds and the guarantees that apply do not change."""

    lo: int
    hi: int
    free: int
    held: dict[int, int] = field(default_factory=dict)  # team → GPUs it holds
    guaranteed: dict[int, int] = field(default_factory=dict)  # team → GPUs guaranteed here

    def reserved(self, team_id: int) -> int:
        """The GPUs ``team_id``'s guarantee still reserves here: guaranteed and not yet held."""
        return max(0, self.guaranteed.get(team_id, 0) - self.held.get(team_id, 0))

    def reserved_by_others(self, team_id: int | None) -> dict[int, int]:
        return {team: self.reserved(team) for team in self.guaranteed if team != team_id and self.reserved(team)}


def segments(*, lo: int, hi: int, capacity: int, holds: Iterable[Held], shares: Iterable[Share]) -> list[Segment]:
    """``[lo, hi)`` cut where a hold or a guarantee's hours start or end, each piece with what is free, held
    and guaranteed in it. ``capacity`` is the model's GPUs that may be booked."""
    holds = [h for h in holds if h.lo < hi and h.hi > lo]
    spans = [(max(a, lo), min(b, hi), share) for share in shares for a, b in share.active if a < hi and b > lo]
    cuts = sorted({lo, hi, *(max(h.lo, lo) for h in holds), *(min(h.hi, hi) for h in holds),
                   *(a for a, _b, _s in spans), *(b for _a, b, _s in spans)})
    pieces = []
    for a, b in pairwise(cuts):
        held: Counter = Counter(h.team_id for h in holds if h.lo <= a and h.hi >= b)
        guaranteed: Counter = Counter()
        for start, end, share in spans:
            if start <= a and end >= b:
                guaranteed[share.team_id] += share.gpus
        pieces.append(Segment(a, b, capacity - sum(held.values()),
                              {t: n for t, n in held.items() if t is not None}, dict(guaranteed)))
    return pieces


def reserved_for_others(*, lo: int, hi: int, capacity: int, holds: Iterable[Held], shares: Iterable[Share],
                        team_id: int | None) -> list[tuple[int, int, int]]:
    """(lo, hi, GPUs) of ``[lo, hi)``: how many GPUs of the model the guarantees of teams other than
    ``team_id`` still reserve (None: every team's), piece by piece."""
    return [(s.lo, s.hi, sum(s.reserved_by_others(team_id).values()))
            for s in segments(lo=lo, hi=hi, capacity=capacity, holds=holds, shares=shares)]


@dataclass(frozen=True)
class Shortfall:
    """Where a booking would take reserved GPUs: the piece, and the guarantee that reserves the most there."""

    lo: int
    hi: int
    share: Share
    reserved: int  # GPUs that guarantee reserves in the piece
    free_after: int  # GPUs the booking would leave free there


def guarantee_in_the_way(*, lo: int, hi: int, capacity: int, holds: Iterable[Held], shares: Sequence[Share],
                         team_id: int, count: int) -> Shortfall | None:
    """The first piece of ``[lo, hi)`` where ``count`` more GPUs for ``team_id`` would leave fewer free GPUs
    than other teams' guarantees reserve (None: the guarantees allow it). A piece without ``count`` free
    GPUs is left to the holds' own check, which names the booking in the way."""
    by_team = {share.team_id: share for share in shares}
    for piece in segments(lo=lo, hi=hi, capacity=capacity, holds=holds, shares=shares):
        if count > piece.free or count <= piece.reserved(team_id):
            continue
        others = piece.reserved_by_others(team_id)
        if piece.free - count >= sum(others.values()):
            continue
        team = min(others, key=lambda t: (-others[t], t))
        return Shortfall(piece.lo, piece.hi, by_team[team], others[team], piece.free - count)
    return None


def weekly_ranges(*, weekdays: frozenset[int], start: time | None, end: time | None, zone: tzinfo,
                  lo: datetime, hi: datetime) -> list[tuple[datetime, datetime]]:
    """The UTC ranges within ``[lo, hi)`` of the local ``weekdays`` (Monday 0) from ``start`` to ``end`` in
    ``zone`` (no times: the whole day). A day's range follows the zone's clock, so it keeps its local
    hours across a daylight-saving change."""
    if start is None and len(weekdays) == 7:
        return [(lo, hi)] if lo < hi else []
    ranges: list[tuple[datetime, datetime]] = []
    first, last = lo.astimezone(zone).date() - timedelta(days=1), hi.astimezone(zone).date()
    for offset in range((last - first).days + 1):
        day = first + timedelta(days=offset)
        if day.weekday() not in weekdays:
            continue
        a, b = _local(day, start or time.min, zone), (_local(day, end, zone) if end is not None
                                                      else _local(day + timedelta(days=1), time.min, zone))
        a, b = max(a, lo), min(b, hi)
        if a < b:
            if ranges and ranges[-1][1] == a:
                a = ranges.pop()[0]
            ranges.append((a, b))
    return ranges


def _local(day: date, moment: time, zone: tzinfo) -> datetime:
    return datetime.combine(day, moment, tzinfo=zone).astimezone(UTC)


def epoch(moment: datetime) -> int:
    return int(moment.timestamp())


# --- the reads for the booking services -------------------------------------------------------------------


def shares_of(guarantees: Iterable[TeamGuarantee], start: datetime, end: datetime) -> list[Share]:
    """The guarantees as the rule reads them over ``[start, end)``, their hours in the business zone."""
    zone = business_zone()
    return [
        Share(g.pk, g.team_id, g.gpus, tuple(
            (epoch(a), epoch(b)) for a, b in weekly_ranges(
                weekdays=GuaranteeDays(g.days).weekdays, start=g.start_time, end=g.end_time, zone=zone, lo=start,
                hi=end,
            )
        ))
        for g in guarantees
    ]


def model_holds(gpu_model_id: int, start: datetime, end: datetime, *,
                exclude_booking: int | None = None) -> tuple[int, list[Held]]:
    """(the model's GPUs that may be booked, the active holds on them over ``[start, end)``)."""
    gpu_ids = list(bookable_gpus().filter(model_id=gpu_model_id).values_list("pk", flat=True))
    holds = GpuHold.objects.overlapping(start, end).filter(gpu_id__in=gpu_ids)
    if exclude_booking is not None:
        holds = holds.exclude(booking_id=exclude_booking)
    rows = holds.values_list(RangeBoundEpoch("during", function="lower"), RangeBoundEpoch("during", function="upper"),
                             "team_id")
    return len(gpu_ids), [Held(*row) for row in rows]


def guarantee_refusal(*, team_id: int, counts: dict[int, int], start: datetime, end: datetime,
                      exclude_booking: int | None = None) -> str | None:
    """Why ``counts`` (GPU model id → GPUs) more for ``team_id`` over ``[start, end)`` would take GPUs that
    another team's guarantee reserves, naming that guarantee; None when no guarantee is in the way. The
    caller holds the writers' turn, so the holds read here are the ones the booking will join."""
    guarantees = list(TeamGuarantee.objects.filter(gpu_model_id__in=list(counts)).exclude(team_id=team_id)
                      .select_related("team", "gpu_model"))
    if not guarantees:
        return None
    own = list(TeamGuarantee.objects.filter(gpu_model_id__in=list(counts), team_id=team_id))
    for model_id, count in sorted(counts.items()):
        of_model = [g for g in guarantees if g.gpu_model_id == model_id]
        if not of_model:
            continue
        capacity, holds = model_holds(model_id, start, end, exclude_booking=exclude_booking)
        shares = shares_of([*of_model, *(g for g in own if g.gpu_model_id == model_id)], start, end)
        short = guarantee_in_the_way(lo=epoch(start), hi=epoch(end), capacity=capacity, holds=holds, shares=shares,
                                     team_id=team_id, count=count)
        if short is not None:
            guarantee = next(g for g in of_model if g.pk == short.share.guarantee_id)
            return guarantee_message(guarantee, count=count, start=start, end=end, shortfall=short)
    return None


def guarantee_message(guarantee: TeamGuarantee, *, count: int, start: datetime, end: datetime,
                      shortfall: Shortfall) -> str:
    """What the 409 says: the guarantee in the way (team, GPUs, hours), what it reserves and when."""
    at = datetime.fromtimestamp(shortfall.lo, UTC), datetime.fromtimestamp(shortfall.hi, UTC)
    return _(
        "%(count)d × %(model)s %(span)s would take GPUs reserved by the guaranteed share of team %(team)s "
        "(%(gpus)d × %(model)s, %(hours)s): it still reserves %(reserved)d %(when)s, and this booking would "
        "leave %(free)d free."
    ) % {
        "count": count, "model": guarantee.gpu_model.short_name, "span": local_span(start, end),
        "team": guarantee.team, "gpus": guarantee.gpus, "hours": guarantee.hours_label,
        "reserved": shortfall.reserved, "when": local_span(*at), "free": max(shortfall.free_after, 0),
    }



@dataclass(frozen=True)
class GuaranteeNow:
    """A guarantee as the calendar and the board show it: its hours, whether they apply at ``now``, what the
    team holds of the model then and what the guarantee still reserves (idle capacity with a name)."""

    guarantee: TeamGuarantee
    applies_now: bool
    held_now: int
    reserved_now: int


def guarantees_now(*, now: datetime, team_ids: Iterable[int] | None = None) -> list[GuaranteeNow]:
    """Every guarantee (or those of ``team_ids``) at ``now``. Two queries."""
    guarantees = TeamGuarantee.objects.select_related("team", "gpu_model")
    if team_ids is not None:
        guarantees = guarantees.filter(team_id__in=list(team_ids))
    guarantees = list(guarantees)
    if not guarantees:
        return []
    held = Counter(
        GpuHold.objects.overlapping(now, now + timedelta(seconds=1))
        .filter(team_id__in={g.team_id for g in guarantees}, gpu__model_id__in={g.gpu_model_id for g in guarantees})
        .values_list("team_id", "gpu__model_id")
    )
    rows = []
    for guarantee, share in zip(guarantees, shares_of(guarantees, now, now + timedelta(seconds=1)), strict=True):
        applies = bool(share.active)
        holding = held[(guarantee.team_id, guarantee.gpu_model_id)]
        rows.append(GuaranteeNow(guarantee, applies, holding, max(0, guarantee.gpus - holding) if applies else 0))
    return rows
