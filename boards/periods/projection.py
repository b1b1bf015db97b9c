"""Next month's need from the months before it (issue 15): pure maths, no ORM.

Input: the monthly means of concurrent GPUs held of the last *full* months, oldest first. With three
months, the projection is the least-squares straight line through them (x = 0, 1, 2) evaluated at the next
month (x = 3), clamped at 0, and its band is **± the largest absolute residual** of the three months around
that line (0 for a perfectly linear history; low is clamped at 0 too). With more than three months only the
last three are used. With fewer than three there is **no extrapolation**: the result says "not enough
history (N months)" and carries the last known mean, if any.

Arithmetic is exact (``Fraction``) throughout; the figures are rounded half-up to :data:`PLACES` decimals
once, at the end, as ``Decimal``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from fractions import Fraction

MONTHS_NEEDED = 3
PLACES = 2  # GPUs, to hundredths (fractional shares and MIG slices hold parts of a GPU)
LINEAR_TREND = "linear_trend"
NOT_ENOUGH_HISTORY = "not_enough_history"


def to_decimal(value: Fraction | int, places: int = PLACES) -> Decimal:
    """``value`` rounded half-up (away from zero) to ``places`` decimals, from the exact fraction."""
    scaled = Fraction(value) * 10**places
    whole, remainder = divmod(abs(scaled.numerator), scaled.denominator)
    if 2 * remainder >= scaled.denominator:
        whole += 1
    return Decimal(-whole if scaled < 0 else whole).scaleb(-places)


@dataclass(frozen=True)
class Projection:
    """A month's projected mean concurrent GPUs held. ``method`` is :data:`LINEAR_TREND` (``value`` between
    ``low`` and ``high``) or :data:`NOT_ENOUGH_HISTORY` (``value``, ``low`` and ``high`` None;
    ``last_mean`` the latest month's mean if there is one). ``months_used``: the full months it rests on.
    Figures in GPUs, to :data:`PLACES` decimals."""

    method: str
    value: Decimal | None
    low: Decimal | None
    high: Decimal | None
    months_used: int
    enough_history: bool
    last_mean: Decimal | None = None
    band: Decimal | None = None  # the largest absolute residual: low and high are value ∓ band, clamped at 0


def project_next_month(history: Sequence[tuple[date, Fraction | Decimal | int]]) -> Projection:
    """The projection of the month after the last of ``history`` ((month's first day, mean GPUs held),
    oldest first); see the module docstring."""
    means = [Fraction(mean) for _month, mean in history][-MONTHS_NEEDED:]
    if len(means) < MONTHS_NEEDED:
        return Projection(method=NOT_ENOUGH_HISTORY, value=None, low=None, high=None, months_used=len(means),
                          enough_history=False, last_mean=to_decimal(means[-1]) if means else None)
    slope, intercept = _least_squares(means)
    largest_residual = max(abs(y - (intercept + slope * x)) for x, y in enumerate(means))
    projected = intercept + slope * len(means)
    return Projection(
        method=LINEAR_TREND, value=to_decimal(max(projected, Fraction(0))),
        low=to_decimal(max(projected - largest_residual, Fraction(0))),
        high=to_decimal(max(projected + largest_residual, Fraction(0))),
        months_used=len(means), enough_history=True, last_mean=to_decimal(means[-1]),
        band=to_decimal(largest_residual),
    )


def _least_squares(means: Sequence[Fraction]) -> tuple[Fraction, Fraction]:
    """(slope, intercept) of the least-squares line through (0, y0), (1, y1), …"""
    n = len(means)
    x_mean = Fraction(n - 1, 2)
    y_mean = sum(means, Fraction(0)) / n
    spread = sum((x - x_mean) ** 2 for x in range(n))
    slope = sum((x - x_mean) * (y - y_mean) for x, y in enumerate(means)) / spread
    return slope, y_mean - slope * x_mean
