"""The demo's money: rate cards (from the history's first month, with a price change in the middle of last
month), quotas (one team close to its quota this month), and last month closed. Loaded after the usage
history (demo/history.py); where ``make demo`` loads the older months in the background, last month is
closed when they are in (``close=False`` first, then :func:`close_last_month`). Idempotent."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from django.conf import settings
from django.utils import timezone

from accounting.models import DailyUnplacedUsage, DailyUsage, Quota, RateCard, Statement, StatementStatus
from accounting.money.close import CloseRefused, close_period
from accounting.quotas.watch import quota_alerts
from accounting.usage.states import ALLOCATED_STATES
from cluster.models import CollectionState, GpuModel, Node
from core.timeutils import business_day_of, business_today, month_days, previous_month
from core.units import TICKS_PER_CARD_HOUR
from teams.models import Team

# short name → (price to the 15th of last month, price from then on), per card-hour
PRICES = {"H200": (Decimal("28.00"), Decimal("26.00")), "H100": (Decimal("20.00"), Decimal("19.00")),
          "L40S": (Decimal("8.00"), Decimal("8.00"))}
# team slug → (GPU model short name or None for team-wide, share of this month's usage so far the quota is)
QUOTAS = {"llm": (None, Decimal("1.09")), "vision": ("H100", Decimal("1.9")), "inference": (None, Decimal("4"))}


def load_demo_money(*, now: datetime | None = None, history_end: datetime | None = None,
                    history_start: datetime | None = None, close: bool = True) -> dict:
    now = now or timezone.now()
    this_month = month_days(business_today(now=now))[0]
    last_month = previous_month(this_month)
    first_month = month_days(business_day_of(history_start))[0] if history_start is not None else last_month
    _rate_cards(min(first_month, last_month), last_month)
    _quotas(this_month, now)
    if history_end is not None:
        # The history is generated: its data is complete to where it ends; the collector takes over from there.
        for node in Node.objects.filter(collection__isnull=True):
            CollectionState.objects.create(node=node, data_complete_to=history_end)
    quota_alerts(now=now)  # the lead of a team near its quota sees the warning at once
    return close_last_month(now=now) if close else {"closed": None, "refused": []}


def close_last_month(*, now: datetime | None = None) -> dict:
    """Close last month (once): finance's first statement."""
    now = now or timezone.now()
    last_month = previous_month(month_days(business_today(now=now))[0])
    closed = None
    if not Statement.objects.filter(period=last_month, status=StatementStatus.CLOSED).exists():
        try:
            closed = close_period(period=last_month, now=now)
        except CloseRefused as refused:
            return {"closed": None, "refused": refused.problems}
    return {"closed": closed.pk if closed else None, "refused": []}


def _rate_cards(first_month: date, last_month: date) -> None:
    change = last_month.replace(day=15)
    for model in GpuModel.objects.filter(short_name__in=PRICES):
        if RateCard.objects.filter(gpu_model=model).exists():
            continue
        before, after = PRICES[model.short_name]
        currency = settings.CARDHOUR_CURRENCY
        if before == after:
            RateCard.objects.create(gpu_model=model, valid_from=first_month, price_per_card_hour=before, currency=currency)
            continue
        RateCard.objects.create(gpu_model=model, valid_from=first_month, valid_until=change, price_per_card_hour=before,
                                currency=currency)
        RateCard.objects.create(gpu_model=model, valid_from=change, price_per_card_hour=after, currency=currency)


def _quotas(this_month: date, now: datetime) -> None:
    following = month_days(this_month)[1]
    today = business_today(now=now)
    for slug, (model_name, share) in QUOTAS.items():
        team = Team.objects.filter(slug=slug).first()
        model = GpuModel.objects.filter(short_name=model_name).first() if model_name else None
        if team is None or Quota.objects.filter(team=team, period_start=this_month).exists():
            continue
        used = DailyUsage.objects.filter(team=team, day__gte=this_month, day__lte=today, state__in=ALLOCATED_STATES)
        unplaced = DailyUnplacedUsage.objects.filter(team=team, day__gte=this_month, day__lte=today)
        if model is not None:
            used, unplaced = used.filter(gpu__model=model), unplaced.filter(gpu_model=model)
        ticks = sum(used.values_list("ticks", flat=True)) + sum(unplaced.values_list("ticks", flat=True))
        card_hours = max(Decimal(100), (Decimal(ticks) / TICKS_PER_CARD_HOUR * share).quantize(Decimal(1)))
        Quota.objects.create(team=team, gpu_model=model, period_start=this_month, expires=following,
                             card_hours=card_hours)
