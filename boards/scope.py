"""What one board shows: a business day and the pool, GPU model, node and team it is narrowed to, with the
SQL conditions every read of the board applies (no ORM query here)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.db.models import Q

from core.timeutils import business_day_bounds, business_today

COMPARED_DAYS = 7  # the tiles compare a day with the mean of the days before it


@dataclass(frozen=True)
class BoardScope:
    day: date
    now: datetime
    pool: str | None = None
    gpu_model_id: int | None = None
    node_id: int | None = None
    team_id: int | None = None

    @property
    def bounds(self) -> tuple[datetime, datetime]:
        return business_day_bounds(self.day)

    @property
    def live(self) -> bool:
        """Today's board: its figures still grow, and the page refreshes them."""
        return self.day >= business_today(now=self.now)

    @property
    def compared_from(self) -> date:
        return self.day - timedelta(days=COMPARED_DAYS)

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
