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
from decimal import Decimal
from fractions import Fraction

from django.conf import settings
from django.db.models import Q, Sum

from accounting.models import DailyHolderUsage
from accounting.money.pricing import line_amount
from accounting.money.statements import cost_team_ids
from accounting.usage.figures import row_figures
from accounting.usage.states import IDLE
from boards.figures import rate_of, rates_between, zero_money
from boards.maths import percent
from boards.scope import BoardScope
from cluster.models import Booking, Job
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
    unplaced: bool = False


def idle_ranking(scope: BoardScope, *, user) -> list[IdleRow]:
    """Every allocation of the day in scope, most idle first (ties: most allocated, then by label). Four
    queries (holders, jobs, bookings, rates) whatever their number."""
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
    rows = (query.values_list("job_id", "booking_id", "team_id", "gpu__model_id", "state")
            .annotate(total=Sum("ticks")).order_by())
    holders: dict[tuple, dict] = defaultdict(lambda: {"allocated": 0, "idle": defaultdict(int), "team": None,
                                                      "unplaced": False})
    for job_id, booking_id, team_id, model_id, state, total in rows:
        entry = holders[("job", job_id) if job_id else ("booking", booking_id)]
        entry["team"] = team_id
        entry["allocated"] += total
        entry["unplaced"] |= model_id is None and job_id is not None
        if state == IDLE:
            entry["idle"][model_id] += total
    return _rows(scope, holders, user)


def _rows(scope: BoardScope, holders: dict, user) -> list[IdleRow]:
    visible = visible_team_ids(user)
    cost_teams = cost_team_ids(user)
    currency = settings.CARDHOUR_CURRENCY
    rates = rates_between(scope.day, scope.day)
    job_ids = [i for (kind, i) in holders if kind == "job"]
    booking_ids = [i for (kind, i) in holders if kind == "booking"]
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=job_ids).select_related("team", "project").only(
        "external_id", "name", "user", "gpu_count", "team_id", "team__name", "project_id", "project__name")}
    bookings = {b.pk: b for b in Booking.objects.filter(pk__in=booking_ids).select_related("team", "project", "booker").only(
        "note", "gpu_count", "team_id", "team__name", "project_id", "project__name", "booker_id", "booker__username")}
    out: list[IdleRow] = []
    folded: dict[int | None, dict] = defaultdict(lambda: {"allocated": 0, "idle": 0, "count": 0, "name": ""})
    for (kind, object_id), entry in holders.items():
        idle_ticks = sum(entry["idle"].values())
        team_id = entry["team"]
        obj = jobs.get(object_id) if kind == "job" else bookings.get(object_id)
        team_name = obj.team.name if obj is not None and obj.team_id else ""
        if not (visible is None or team_id in visible):
            fold = folded[team_id]
            fold["allocated"] += entry["allocated"]
            fold["idle"] += idle_ticks
            fold["count"] += 1
            fold["name"] = team_name
            continue
        cost = None
        if cost_teams is None or team_id in cost_teams:
            cost = zero_money()
            for model_id, ticks in entry["idle"].items():
                price = rate_of(rates, model_id, scope.day)
                if price is not None:
                    cost += line_amount(ticks, price, currency)
        out.append(_row(kind, object_id, obj, team_name, entry["allocated"], idle_ticks, cost, entry["unplaced"]))
    for fold in folded.values():
        out.append(_row("team", None, None, fold["name"], fold["allocated"], fold["idle"], None, False,
                        holders=fold["count"]))
    out.sort(key=lambda r: (-r.idle_ticks, -r.allocated_card_hours, r.team.casefold(), r.label))
    return out


def _row(kind, object_id, obj, team, allocated, idle, cost, unplaced, holders: int = 1) -> IdleRow:
    figures = row_figures({IDLE: idle, "busy": allocated - idle}, gpu_level=False)
    if kind == "job" and obj is not None:
        label = f"{obj.external_id} · {obj.name}" if obj.name and obj.name != obj.external_id else obj.external_id
        project, person, gpus = (obj.project.name if obj.project else ""), obj.user, obj.gpu_count
    elif kind == "booking" and obj is not None:
        label = f"#{obj.pk}" + (f" · {obj.note}" if obj.note else "")
        project = obj.project.name if obj.project else ""
        person, gpus = (obj.booker.get_username() if obj.booker else ""), Decimal(obj.gpu_count)
    else:
        label, project, person, gpus = "", "", "", None
    return IdleRow(
        kind=kind, object_id=object_id, label=label, team=team, project=project, user=person, gpus=gpus,
        holders=holders, idle_card_hours=figures["card_hours_idle"], allocated_card_hours=figures["card_hours_allocated"],
        idle_share=percent(Fraction(idle, allocated)) if allocated else None, idle_cost=cost, idle_ticks=idle,
        unplaced=unplaced,
    )
