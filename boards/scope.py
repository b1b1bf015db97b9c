"""What one board shows: a business day (or a span of them: a week, a month) and the pool, GPU model, node and
team it is narrowed to, with the SQL conditions every read of the board applies (no ORM query here)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.db.models import Q

from core.timeutils import business_day_bounds, business_today, month_days, previous_month

COMPARED_DAYS = 7  # the tiles compare a day with the mean of the days before it
Span = tuple[date, date]  # first and last business day, both included


@dataclass(frozen=True)
class BoardScope:
    day: date
    now: datetime
    pool: str | None = None
    gpu_model_id: int | None = None
    node_id: int | None = None
    team_id: int | None = None
    last: date | None = None  # a span's last business day (``day`` its first); None: the one day

    @property
    def last_day(self) -> date:
        return self.last or self.day

    @property
    def span(self) -> Span:
        return self.day, self.last_day

    @property
    def bounds(self) -> tuple[datetime, datetime]:
        return business_day_bounds(self.day)[0], business_day_bounds(self.last_day)[1]

    @property
    def live(self) -> bool:
        """Today's board (or a span holding today): its figures still grow."""
        return self.last_day >= business_today(now=self.now)

    @property
    def compared_spans(self) -> list[Span]:
        """What the tiles compare with (the mean of): the seven days before one day; the month before a whole
        calendar month; else the span of the same length just before (a week: the week before)."""
        if self.last is None:
            return [(d, d) for d in (self.day - timedelta(days=n) for n in range(1, COMPARED_DAYS + 1))]
        if self.day.day == 1 and self.last + timedelta(days=1) == month_days(self.day)[1]:
            return [(previous_month(self.day), self.day - timedelta(days=1))]
        length = (self.last - self.day).days + 1
        return [(self.day - timedelta(days=length), self.day - timedelta(days=1))]

    @property
    def compared_from(self) -> date:
        return min(first for first, _last in self.compared_spans)

    @property
    def narrowed_to_gpus(self) -> bool:
        """A pool or node filter: jobs whose GPUs are not known (unplaced) cannot be said to be in it."""
        return self.pool is not None or self.node_id is not None

    def gpu_q(self, prefix: str = "gpu__") -> Q:
        """The GPUs in scope, as a condition on a model's GPU foreign key (``prefix``)."""
        q = Q()
        if self.pool is not None:
            q &= Q(**{f"{prefix}node__pool": self.pool})
        if self.gpu_model_id is not None:
            q &= Q(**{f"{prefix}model_id": self.gpu_model_id})
        if self.node_id is not None:
            q &= Q(**{f"{prefix}node_id": self.node_id})
        return q

    def gpu_sql(self, alias: str = "g", node_alias: str = "n") -> tuple[str, dict]:
        """The same condition for raw SQL over a GPU table ``alias`` joined to its node ``node_alias``."""
        parts, params = ["TRUE"], {}
        if self.pool is not None:
            parts.append(f"{node_alias}.pool = %(pool)s")
            params["pool"] = self.pool
        if self.gpu_model_id is not None:
            parts.append(f"{alias}.model_id = %(gpu_model_id)s")
            params["gpu_model_id"] = self.gpu_model_id
        if self.node_id is not None:
            parts.append(f"{alias}.node_id = %(node_id)s")
            params["node_id"] = self.node_id
        return " AND ".join(parts), params
