"""Idle allocations, ranked (issue 14): every job and booking that held GPUs on the day (unplaced jobs
too), by idle card-hours, from the holders' daily usage (``DailyHolderUsage``): one GROUP BY for the
day, whatever the number of allocations. The idle cost is each holder's idle card-hours at its GPU
model's rate card of the day, rounded once per holder and model.

Scoped (DESIGN.md §2): a holder of a team the viewer sees in full is a row with its job or booking,
user and project; the holders of any other team fold into one row per team with its totals only (no
job, user, project or cost). Costs are shown only where the viewer sees the team's costs."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import BigIntegerField, Q, Sum
from django.db.models.functions import Cast, Coalesce

from accounting.models import DailyHolderUsage
from accounting.money.close import rate_cards
from accounting.money.pricing import card_hours, line_amount, rate_on
from accounting.money.statements import cost_team_ids
from accounting.usage.states import IDLE
from boards.figures import zero_money
from boards.scope import BoardScope
from cluster.inventory.holders import booking_label, job_label
from cluster.jobs.kpis import percent_of
from cluster.models import Booking, Job
from core.queries import id_array
from teams.models import Team
from teams.selectors import visible_team_ids

TOP = 20


@dataclass(frozen=True)
class IdleRow:
    """One allocation's day (``kind``: job, booking, or team for another team's folded totals)."""

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


def idle_ranking(scope: BoardScope, *, user) -> list[IdleRow]:
    """Every allocation of the day in scope, most idle first (ties: most allocated, then team, then label).
    Five queries (holders, teams, jobs, bookings, rates) whatever their number."""
    return top_idle(scope, user=user)[0]


def top_idle(scope: BoardScope, *, user, limit: int | None = None) -> tuple[list[IdleRow], int]:
    """The first ``limit`` rows of :func:`idle_ranking` (all: None) and the number of rows in all: the
    jobs and bookings are read, and the costs computed, for the rows shown only (the board shows 20 of
    thousands)."""
    query = DailyHolderUsage.objects.filter(day=scope.day)
    placed = Q(gpu__isnull=False) & scope.gpu_q()
    if scope.narrowed_to_gpus:
        query = query.filter(placed)
    else:
        unplaced = Q(gpu__isnull=True)
        if scope.gpu_model_id is not None:
            unplaced &= Q(job__gpu_model_id=scope.gpu_model_id)
        query = query.filter(placed | unplaced)
    if scope.team_id is not None:
        query = query.filter(team_id=scope.team_id)
    rows = (query.values_list("job_id", "booking_id", "team_id", "gpu__model_id")
            .annotate(total=Cast(Sum("ticks"), BigIntegerField()),
                      idle=Cast(Coalesce(Sum("ticks", filter=Q(state=IDLE)), 0), BigIntegerField()))
            .order_by())
    holders: dict[tuple, dict] = {}
    for job_id, booking_id, team_id, model_id, total, idle in rows:  # bigint: ticks stay integers, not Decimals
        key = ("job", job_id) if job_id else ("booking", booking_id)
        entry = holders.get(key)
        if entry is None:
            entry = holders[key] = {"allocated": 0, "idle": {}, "team": team_id, "unplaced": False}
        entry["allocated"] += total
        entry["unplaced"] |= model_id is None and job_id is not None
        if idle:
            entry["idle"][model_id] = entry["idle"].get(model_id, 0) + idle
    return _rows(scope, holders, user, limit)


def _rows(scope: BoardScope, holders: dict, user, limit: int | None) -> tuple[list[IdleRow], int]:
    visible = visible_team_ids(user)
    team_names = dict(Team.objects.filter(pk__in={e["team"] for e in holders.values()} - {None}).values_list("pk", "name"))
    folded: dict[int | None, dict] = defaultdict(lambda: {"allocated": 0, "idle": 0, "count": 0})
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
    for team_id, fold in folded.items():
        ranked.append((-fold["idle"], -fold["allocated"], team_names.get(team_id, "").casefold(), ("team", team_id)))
    ranked.sort(key=lambda item: item[:3])
    shown = ranked
    if limit is not None and len(ranked) > limit:  # and the rows tied with the last: their labels decide
        last = ranked[limit - 1][:3]
        shown = [item for n, item in enumerate(ranked) if n < limit or item[:3] == last]
    out = _idle_rows(scope, [item[3] for item in shown], holders, folded, team_names, user)
    out.sort(key=lambda r: (-r.idle_ticks, -r.allocated_ticks, r.team.casefold(), r.label))
    return (out if limit is None else out[:limit]), len(ranked)


def _idle_rows(scope: BoardScope, keys: list[tuple], holders: dict, folded: dict, team_names: dict,
               user) -> list[IdleRow]:
    """The rows of ``keys`` (("job", id), ("booking", id) or ("team", id) for a folded team)."""
    cost_teams = cost_team_ids(user)
    currency = settings.CARDHOUR_CURRENCY
    rates = rate_cards(scope.day, scope.day + timedelta(days=1))
    jobs = {pk: rest for pk, *rest in Job.objects.filter(pk__in=id_array(i for k, i in keys if k == "job")).values_list(
        "pk", "external_id", "name", "user", "gpu_count", "project__name")}
    bookings = {pk: rest for pk, *rest in Booking.objects.filter(pk__in=[i for k, i in keys if k == "booking"]).values_list(
        "pk", "note", "gpu_count", "project__name", "booker__username")}
    out: list[IdleRow] = []
    for kind, object_id in keys:
        if kind == "team":
            fold = folded[object_id]
            out.append(_row("team", None, "", team_names.get(object_id, ""), "", "", None, fold["allocated"],
                            fold["idle"], None, False, holders=fold["count"]))
            continue
        entry = holders[(kind, object_id)]
        team_id = entry["team"]
        cost = None
        if cost_teams is None or team_id in cost_teams:
            cost = zero_money()
            for model_id, ticks in entry["idle"].items():
                rate = rate_on(rates, model_id, scope.day)
                if rate is not None:
                    cost += line_amount(ticks, rate.price, currency)
        if kind == "job":
            external_id, name, person, gpus, project = jobs.get(object_id, ("", "", "", None, None))
            label = job_label(external_id, name)
        else:
            note, gpus, project, person = bookings.get(object_id, ("", None, None, ""))
            label, gpus = booking_label(object_id, note), Decimal(gpus) if gpus is not None else None
        out.append(_row(kind, object_id, label, team_names.get(team_id, ""), project or "", person or "", gpus,
                        entry["allocated"], entry["idle_ticks"], cost, entry["unplaced"]))
    return out


def _row(kind, object_id, label, team, project, person, gpus, allocated, idle, cost, unplaced,
         holders: int = 1) -> IdleRow:
    return IdleRow(
        kind=kind, object_id=object_id, label=label, team=team, project=project, user=person, gpus=gpus,
        holders=holders, idle_card_hours=card_hours(idle), allocated_card_hours=card_hours(allocated),
        idle_share=percent_of(idle, allocated), idle_cost=cost, idle_ticks=idle,
        allocated_ticks=allocated, unplaced=unplaced,
    )
