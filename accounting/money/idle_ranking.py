"""Idle allocations, ranked (issues 14, 15): every job and booking that held GPUs over business days
``[first, last]`` (unplaced jobs too), by idle card-hours, from the holders' daily usage
(``DailyHolderUsage``): one GROUP BY, whatever the number of allocations. The daily board ranks one day
(boards/ranking.py), the team page its team's month so far: the same rows from the same function. The
idle cost is each holder's idle card-hours at its GPU model's rate card, rounded once per holder and rate
card (a day's rate card: a rate change inside the period makes a line of each).

Scoped (DESIGN.md §2): a holder of a team the viewer sees in full is a row with its job or booking,
user and project; the holders of any other team fold into one row per team with its totals only (no
job, user, project or cost). Costs are shown only where the viewer sees the team's costs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import BigIntegerField, Q, Sum
from django.db.models.functions import Cast, Coalesce

from accounting.models import DailyHolderUsage
from accounting.money.close import rate_cards
from accounting.money.pricing import card_hours, line_amount, rate_on
from accounting.money.statements import cost_team_ids
from accounting.usage.states import BUSY, IDLE
from cluster.inventory.holders import booking_label, job_label
from cluster.jobs.kpis import percent_of
from cluster.models import Booking, Job
from core.money import MINOR_UNITS
from core.queries import id_array
from teams.models import Team
from teams.selectors import visible_team_ids


@dataclass(frozen=True)
class IdleRow:
    """One allocation over the period (``kind``: job, booking, or team for another team's folded totals)."""

    kind: str
    object_id: int | None
    label: str
    team: str
    project: str
    user: str
    gpus: Decimal | None
    holders: int  # 1, or how many allocations a folded team row sums
    idle_card_hours: Decimal
    allocated_card_hours: Decimal
    idle_share: Decimal | None
    idle_cost: Decimal | None
    idle_ticks: int
    allocated_ticks: int = 0
    unplaced: bool = False
    # Beyond the duty cycle (issue 16): shallow busy (busy under the SM-activity threshold) apart from
    # idle, priced the same way; None where the holder was busy but none of its busy minutes had SM data
    # (no GPM on its GPUs: an L40S, a MIG instance without support, an older driver).
    shallow_card_hours: Decimal | None = None
    shallow_cost: Decimal | None = None
    shallow_ticks: int = 0
    sm_ticks: int = 0
    memory_held_card_hours: Decimal = Decimal(0)  # the idle card-hours whose GPU held memory
    memory_held_ticks: int = 0

    @property
    def empty_idle_card_hours(self) -> Decimal:
        """Idle card-hours with no memory held (the GPU was free to give back)."""
        return self.idle_card_hours - self.memory_held_card_hours


def rank_idle(first: date, last: date, *, user, gpus: Q | None = None, narrowed_to_gpus: bool = False,
              gpu_model_id: int | None = None, team_id: int | None = None,
              limit: int | None = None) -> tuple[list[IdleRow], int]:
    """The allocations of business days ``[first, last]``, most idle first (ties: most allocated, then team,
    then label): the first ``limit`` (all: None) and the number in all. ``gpus`` narrows the placed usage
    (a condition on ``gpu__``); ``narrowed_to_gpus`` (a pool or node filter) leaves out the unplaced jobs,
    whose GPUs are not known, and ``gpu_model_id`` keeps those of the model; ``team_id`` one team's only.
    The jobs and bookings are read, and the costs computed, for the rows returned only. Five queries
    (holders, teams, jobs, bookings, rates) whatever their number."""
    query = DailyHolderUsage.objects.filter(day__gte=first, day__lte=last)
    placed = Q(gpu__isnull=False) & (gpus or Q())
    if narrowed_to_gpus:
        query = query.filter(placed)
    else:
        unplaced = Q(gpu__isnull=True)
        if gpu_model_id is not None:
            unplaced &= Q(job__gpu_model_id=gpu_model_id)
        query = query.filter(placed | unplaced)
    if team_id is not None:
        query = query.filter(team_id=team_id)
    by_day = first != last  # the idle ticks of each day, to price each at its day's rate card
    rows = (query.values_list("job_id", "booking_id", "team_id", "gpu__model_id", *(("day",) if by_day else ()))
            .annotate(total=Cast(Sum("ticks"), BigIntegerField()),
                      idle=Cast(Coalesce(Sum("ticks", filter=Q(state=IDLE)), 0), BigIntegerField()),
                      busy=Cast(Coalesce(Sum("ticks", filter=Q(state=BUSY)), 0), BigIntegerField()),
                      sm=Cast(Sum("sm_ticks"), BigIntegerField()), shallow=Cast(Sum("shallow_ticks"), BigIntegerField()),
                      held=Cast(Sum("memory_held_ticks"), BigIntegerField()))
            .order_by())
    holders: dict[tuple, dict] = {}
    for job_id, booking_id, holder_team, model_id, *day, total, idle, busy, sm, shallow, held in rows:  # bigint: exact
        key = ("job", job_id) if job_id else ("booking", booking_id)
        entry = holders.get(key)
        if entry is None:
            entry = holders[key] = {"allocated": 0, "idle": {}, "shallow": {}, "busy": 0, "sm": 0, "held": 0,
                                    "team": holder_team, "unplaced": False}
        entry["allocated"] += total
        entry["unplaced"] |= model_id is None and job_id is not None
        entry["busy"] += busy
        entry["sm"] += sm
        entry["held"] += held
        line = (model_id, day[0] if day else first)
        if idle:
            entry["idle"][line] = entry["idle"].get(line, 0) + idle
        if shallow:
            entry["shallow"][line] = entry["shallow"].get(line, 0) + shallow
    return _rows(first, last, holders, user, limit)


def _rows(first: date, last: date, holders: dict, user, limit: int | None) -> tuple[list[IdleRow], int]:
    visible = visible_team_ids(user)
    team_names = dict(Team.objects.filter(pk__in={e["team"] for e in holders.values()} - {None}).values_list("pk", "name"))
    folded: dict[int | None, dict] = defaultdict(lambda: {"allocated": 0, "idle": 0, "count": 0, "busy": 0, "sm": 0,
                                                          "shallow": 0, "held": 0})
    ranked = []  # (−idle, −allocated, team, key): the order, up to the label
    for key, entry in holders.items():
        entry["idle_ticks"] = sum(entry["idle"].values())
        if visible is None or entry["team"] in visible:
            ranked.append((-entry["idle_ticks"], -entry["allocated"], team_names.get(entry["team"], "").casefold(), key))
        else:
            fold = folded[entry["team"]]
            fold["allocated"] += entry["allocated"]
            fold["idle"] += entry["idle_ticks"]
            fold["count"] += 1
            fold["busy"] += entry["busy"]
            fold["sm"] += entry["sm"]
            fold["shallow"] += sum(entry["shallow"].values())
            fold["held"] += entry["held"]
    for team_id, fold in folded.items():
        ranked.append((-fold["idle"], -fold["allocated"], team_names.get(team_id, "").casefold(), ("team", team_id)))
    ranked.sort(key=lambda item: item[:3])
    shown = ranked
    if limit is not None and len(ranked) > limit:  # and the rows tied with the last: their labels decide
        cut = ranked[limit - 1][:3]
        shown = [item for n, item in enumerate(ranked) if n < limit or item[:3] == cut]
    out = _idle_rows(first, last, [item[3] for item in shown], holders, folded, team_names, user)
    out.sort(key=lambda r: (-r.idle_ticks, -r.allocated_ticks, r.team.casefold(), r.label))
    return (out if limit is None else out[:limit]), len(ranked)


def _idle_rows(first: date, last: date, keys: list[tuple], holders: dict, folded: dict, team_names: dict,
               user) -> list[IdleRow]:
    """The rows of ``keys`` (("job", id), ("booking", id) or ("team", id) for a folded team)."""
    cost_teams = cost_team_ids(user)
    currency = settings.CARDHOUR_CURRENCY
    rates = rate_cards(first, last + timedelta(days=1))
    jobs = {pk: rest for pk, *rest in Job.objects.filter(pk__in=id_array(i for k, i in keys if k == "job")).values_list(
        "pk", "external_id", "name", "user", "gpu_count", "project__name")}
    bookings = {pk: rest for pk, *rest in Booking.objects.filter(pk__in=[i for k, i in keys if k == "booking"]).values_list(
        "pk", "note", "gpu_count", "project__name", "booker__username")}
    out: list[IdleRow] = []
    for kind, object_id in keys:
        if kind == "team":
            fold = folded[object_id]
            out.append(_row("team", None, "", team_names.get(object_id, ""), "", "", None, fold["allocated"],
                            fold["idle"], None, False, holders=fold["count"],
                            refined=(fold["busy"], fold["sm"], fold["shallow"], None, fold["held"])))
            continue
        entry = holders[(kind, object_id)]
        team_id = entry["team"]
        cost = shallow_cost = None
        if cost_teams is None or team_id in cost_teams:
            cost = _priced(entry["idle"], rates, currency)
            shallow_cost = _priced(entry["shallow"], rates, currency)
        if kind == "job":
            external_id, name, person, gpus, project = jobs.get(object_id, ("", "", "", None, None))
            label = job_label(external_id, name)
        else:
            note, gpus, project, person = bookings.get(object_id, ("", None, None, ""))
            label, gpus = booking_label(object_id, note), Decimal(gpus) if gpus is not None else None
        out.append(_row(kind, object_id, label, team_names.get(team_id, ""), project or "", person or "", gpus,
                        entry["allocated"], entry["idle_ticks"], cost, entry["unplaced"],
                        refined=(entry["busy"], entry["sm"], sum(entry["shallow"].values()), shallow_cost,
                                 entry["held"])))
    return out


def _priced(lines: dict[tuple, int], rates, currency: str) -> Decimal:
    """Ticks per (GPU model, day) at each day's rate card of the model, rounded once per rate card."""
    by_card: dict[tuple, int] = defaultdict(int)  # (model, rate card's start, price) → ticks
    for (model_id, day), ticks in lines.items():
        rate = rate_on(rates, model_id, day)
        if rate is not None:
            by_card[(model_id, rate.valid_from, rate.price)] += ticks
    cost = Decimal(0).scaleb(-MINOR_UNITS[currency])
    for (_model, _valid_from, price), ticks in by_card.items():
        cost += line_amount(ticks, price, currency)
    return cost


def _row(kind, object_id, label, team, project, person, gpus, allocated, idle, cost, unplaced,
         holders: int = 1, refined: tuple = (0, 0, 0, None, 0)) -> IdleRow:
    busy, sm, shallow, shallow_cost, held = refined
    no_sm_data = busy > 0 and sm == 0  # busy, but no GPM on its GPUs: shallow busy unknown, not 0
    return IdleRow(
        kind=kind, object_id=object_id, label=label, team=team, project=project, user=person, gpus=gpus,
        holders=holders, idle_card_hours=card_hours(idle), allocated_card_hours=card_hours(allocated),
        idle_share=percent_of(idle, allocated), idle_cost=cost, idle_ticks=idle,
        allocated_ticks=allocated, unplaced=unplaced,
        shallow_card_hours=None if no_sm_data else card_hours(shallow), shallow_cost=None if no_sm_data else shallow_cost,
        shallow_ticks=shallow, sm_ticks=sm, memory_held_card_hours=card_hours(held), memory_held_ticks=held,
    )
