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

import numpy as np
from django.conf import settings
from django.db import connection
from django.db.models import BigIntegerField, F, Func, Q, Sum, Value
from django.db.models.functions import Cast, Coalesce

from accounting.models import DailyHolderUsage
from accounting.money.close import rate_cards
from accounting.money.pricing import card_hours, line_amount, rate_on
from accounting.money.statements import cost_team_ids
from accounting.usage.states import BUSY, IDLE
from cluster.inventory.holders import booking_label, job_label
from cluster.jobs.input_bound import InputBound
from cluster.jobs.kpis import percent_of
from cluster.jobs.selectors import jobs_input_bound
from cluster.models import Booking, Job
from core.money import MINOR_UNITS
from core.queries import id_array, numpy_rows
from core.timeutils import business_day_bounds
from teams.models import Team
from teams.selectors import visible_team_ids


@dataclass(slots=True)
class IdleRow:
    """One allocation over the period (``kind``: job, booking, or team for another team's folded totals).
    Not frozen: the ranking builds thousands a request (the JSON lists every allocation of the day), and a
    frozen dataclass sets each of its 19 fields through ``object.__setattr__`` (8 × slower); nothing
    changes a row once built."""

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
    # The input-bound hint (issue 19): set by mark_input_bound for the job rows a page shows; None elsewhere.
    input_bound: InputBound | None = None

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
    return _rows(first, last, _Holders.of(_sums(query, first, by_day=first != last)), user, limit)


def mark_input_bound(rows: list[IdleRow], first: date, last: date) -> list[IdleRow]:
    """Set each job row's input-bound verdict over business days ``[first, last]`` (issue 19): one query
    (:func:`cluster.jobs.selectors.jobs_input_bound`) for the rows given, none when they hold no job. Called
    by the pages on the rows they show (20 on the board, 10 on the team page, a page of 50), never on the
    whole ranking: it reads every minute rollup of those jobs' GPUs over the period."""
    job_ids = [row.object_id for row in rows if row.kind == "job" and row.object_id is not None]
    if job_ids:
        verdicts = jobs_input_bound(job_ids, business_day_bounds(first)[0], business_day_bounds(last)[1])
        for row in rows:
            if row.kind == "job":
                row.input_bound = verdicts.get(row.object_id)
    return rows


def _sums(query, first: date, *, by_day: bool) -> np.ndarray:
    """The usage of ``query`` per holder, GPU model (and day, ``by_day``: to price each day at its rate
    card) as integer columns (:data:`_COLUMNS`; 0 for none, ``day`` in days after ``first``): one GROUP BY,
    read as one packed array (thousands of rows a day, no Python tuple each)."""
    def total(value, **extra):
        return Cast(Coalesce(Sum(value, **extra), 0), BigIntegerField())

    # date − date is a number of days in PostgreSQL
    day = Func(F("day"), Value(first), arg_joiner=" - ", template="(%(expressions)s)") if by_day else Value(0)
    rows = (query.values(holder_job=Coalesce("job_id", 0), holder_booking=Coalesce("booking_id", 0),
                         holder_team=Coalesce("team_id", 0), model=Coalesce("gpu__model_id", 0),
                         offset=Cast(day, BigIntegerField()))
            .annotate(total=total("ticks"), idle=total("ticks", filter=Q(state=IDLE)),
                      busy=total("ticks", filter=Q(state=BUSY)), sm=total("sm_ticks"),
                      shallow=total("shallow_ticks"), held=total("memory_held_ticks"))
            .order_by().values_list(*_COLUMNS))
    sql, params = rows.query.sql_with_params()
    with connection.cursor() as cursor:
        return numpy_rows(cursor, sql, params, "i" * len(_COLUMNS))


_COLUMNS = ("holder_job", "holder_booking", "holder_team", "model", "offset", "total", "idle", "busy", "sm", "shallow", "held")
_JOB, _BOOKING, _TEAM, _MODEL, _DAY, _TOTAL, _IDLE, _BUSY, _SM, _SHALLOW, _HELD = range(len(_COLUMNS))


@dataclass(frozen=True)
class _Holders:
    """The period's holders (a job or a booking each) as columns, in the order of ``keys`` (a job's id × 2,
    a booking's × 2 + 1); ``of_row`` places each row of ``rows`` (:func:`_sums`) in its holder."""

    rows: np.ndarray
    keys: np.ndarray
    of_row: np.ndarray
    team: np.ndarray  # 0: none
    unplaced: np.ndarray
    sums: dict[int, np.ndarray]  # column of _COLUMNS → its sum per holder

    @classmethod
    def of(cls, rows: np.ndarray) -> _Holders:
        key = np.where(rows[:, _JOB] > 0, rows[:, _JOB] * 2, rows[:, _BOOKING] * 2 + 1)
        keys, of_row = np.unique(key, return_inverse=True)
        team = np.zeros(len(keys), dtype=np.int64)
        team[of_row] = rows[:, _TEAM]  # a holder has one team
        unplaced = np.zeros(len(keys), dtype=bool)
        unplaced[of_row[(rows[:, _MODEL] == 0) & (rows[:, _JOB] > 0)]] = True
        sums = {}
        for column in (_TOTAL, _IDLE, _BUSY, _SM, _SHALLOW, _HELD):
            sums[column] = np.zeros(len(keys), dtype=np.int64)
            np.add.at(sums[column], of_row, rows[:, column])
        return cls(rows=rows, keys=keys, of_row=of_row, team=team, unplaced=unplaced, sums=sums)

    def lines(self, shown: list[int], first: date) -> dict[int, dict[int, dict[tuple, int]]]:
        """Per holder of ``shown`` (positions), for idle and shallow busy (:data:`_IDLE`, :data:`_SHALLOW`):
        (GPU model or None, day) → its non-zero ticks."""
        out: dict[int, dict[int, dict[tuple, int]]] = {holder: {_IDLE: {}, _SHALLOW: {}} for holder in shown}
        rows = np.isin(self.of_row, shown)
        days: dict[int, date] = {}
        for holder, model, offset, idle, shallow in zip(self.of_row[rows].tolist(),
                                                         *self.rows[rows][:, [_MODEL, _DAY, _IDLE, _SHALLOW]].T.tolist(),
                                                         strict=True):
            for column, ticks in ((_IDLE, idle), (_SHALLOW, shallow)):
                if ticks:
                    line = (model or None, days.get(offset) or days.setdefault(offset, first + timedelta(days=offset)))
                    lines = out[holder][column]
                    lines[line] = lines.get(line, 0) + ticks
        return out


def _rows(first: date, last: date, holders: _Holders, user, limit: int | None) -> tuple[list[IdleRow], int]:
    visible = visible_team_ids(user)
    team_ids = np.unique(holders.team)
    team_names = dict(Team.objects.filter(pk__in=[t for t in team_ids.tolist() if t]).values_list("pk", "name"))
    by_name = sorted(team_ids.tolist(), key=lambda pk: team_names.get(pk, "").casefold())
    name_rank = np.empty(len(team_ids), dtype=np.int64)
    name_rank[np.searchsorted(team_ids, by_name)] = np.arange(len(team_ids))
    team_of = np.searchsorted(team_ids, holders.team)  # each holder's team's position in team_ids
    sums = holders.sums
    seen = np.ones(len(holders.keys), dtype=bool) if visible is None else np.isin(holders.team, list(visible))
    folded = {}  # team id → its other holders' sums (another team's rows fold into one, DESIGN.md §2)
    for position in np.unique(team_of[~seen]).tolist():
        of_team = ~seen & (team_of == position)
        folded[int(team_ids[position])] = {column: int(sums[column][of_team].sum()) for column in sums} | {
            "count": int(of_team.sum())}
    shown_holders = np.flatnonzero(seen)
    # One ranking of the holders seen and the folded teams: (−idle, −allocated, team's name), then the label.
    idle = np.r_[sums[_IDLE][shown_holders], [f[_IDLE] for f in folded.values()]].astype(np.int64)
    allocated = np.r_[sums[_TOTAL][shown_holders], [f[_TOTAL] for f in folded.values()]].astype(np.int64)
    names = np.r_[name_rank[team_of[shown_holders]],
                  name_rank[np.searchsorted(team_ids, list(folded))] if folded else []].astype(np.int64)
    order = np.lexsort((names, -allocated, -idle))
    if limit is not None and len(order) > limit:  # and the rows tied with the last: their labels decide
        cut = order[limit - 1]
        tied = (idle == idle[cut]) & (allocated == allocated[cut]) & (names == names[cut])
        order = np.r_[order[:limit], [n for n in order[limit:].tolist() if tied[n]]].astype(np.int64)
    folded_ids = list(folded)
    keys = []
    for n in order.tolist():
        if n < len(shown_holders):
            keys.append(int(shown_holders[n]))
        else:
            keys.append(("team", folded_ids[n - len(shown_holders)]))
    out = _idle_rows(first, last, keys, holders, folded, team_names, user)
    out.sort(key=lambda r: (-r.idle_ticks, -r.allocated_ticks, r.team.casefold(), r.label))
    return (out if limit is None else out[:limit]), len(idle)


def _idle_rows(first: date, last: date, keys: list, holders: _Holders, folded: dict, team_names: dict,
               user) -> list[IdleRow]:
    """The rows of ``keys`` (a holder's position, or ("team", id) for a folded team)."""
    cost_teams = cost_team_ids(user)
    currency = settings.CARDHOUR_CURRENCY
    shown = [k for k in keys if not isinstance(k, tuple)]
    # The shown holders' columns as Python integers, read once (numpy scalars cost per access).
    key_of, team_of, unplaced = (dict(zip(shown, column[shown].tolist(), strict=True))
                                 for column in (holders.keys, holders.team, holders.unplaced))
    sums = {column: dict(zip(shown, values[shown].tolist(), strict=True)) for column, values in holders.sums.items()}
    priced = [k for k in shown if cost_teams is None or (team_of[k] or None) in cost_teams]
    lines = holders.lines(priced, first)
    price = _Pricer(rate_cards(first, last + timedelta(days=1)), currency)
    objects = [divmod(key_of[k], 2) for k in shown]  # (id, 1 for a booking)
    jobs = {pk: rest for pk, *rest in Job.objects.filter(pk__in=id_array(i for i, b in objects if not b)).values_list(
        "pk", "external_id", "name", "user", "gpu_count", "project__name")}
    bookings = {pk: rest for pk, *rest in Booking.objects.filter(pk__in=[i for i, b in objects if b]).values_list(
        "pk", "note", "gpu_count", "project__name", "booker__username")}
    out: list[IdleRow] = []
    for key in keys:
        if isinstance(key, tuple):
            team_id = key[1]
            fold = folded[team_id]
            out.append(_row("team", None, "", team_names.get(team_id, ""), "", "", None, fold[_TOTAL], fold[_IDLE],
                            None, False, holders=fold["count"],
                            refined=(fold[_BUSY], fold[_SM], fold[_SHALLOW], None, fold[_HELD])))
            continue
        object_id, is_booking = divmod(key_of[key], 2)
        team_id = team_of[key] or None
        cost = shallow_cost = None
        if key in lines:
            cost, shallow_cost = price(lines[key][_IDLE]), price(lines[key][_SHALLOW])
        if not is_booking:
            kind = "job"
            external_id, name, person, gpus, project = jobs.get(object_id, ("", "", "", None, None))
            label = job_label(external_id, name)
        else:
            kind = "booking"
            note, gpus, project, person = bookings.get(object_id, ("", None, None, ""))
            label, gpus = booking_label(object_id, note), Decimal(gpus) if gpus is not None else None
        out.append(_row(kind, object_id, label, team_names.get(team_id, ""), project or "", person or "", gpus,
                        sums[_TOTAL][key], sums[_IDLE][key], cost, unplaced[key],
                        refined=(sums[_BUSY][key], sums[_SM][key], sums[_SHALLOW][key], shallow_cost, sums[_HELD][key])))
    return out


class _Pricer:
    """Ticks per (GPU model, day) at each day's rate card of the model, rounded once per rate card; each
    (model, day)'s rate card looked up once."""

    def __init__(self, rates, currency: str):
        self.rates, self.currency, self.cards = rates, currency, {}
        self.zero = Decimal(0).scaleb(-MINOR_UNITS[currency])

    def __call__(self, lines: dict[tuple, int]) -> Decimal:
        by_card: dict[tuple, int] = defaultdict(int)  # (model, rate card's start, price) → ticks
        for line, ticks in lines.items():
            rate = self.cards.get(line, False)
            if rate is False:
                rate = self.cards[line] = rate_on(self.rates, *line)
            if rate is not None:
                by_card[(line[0], rate.valid_from, rate.price)] += ticks
        cost = self.zero
        for (_model, _valid_from, price), ticks in by_card.items():
            cost += line_amount(ticks, price, self.currency)
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
