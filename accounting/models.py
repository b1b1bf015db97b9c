"""The accounting app's models, from its domains (usage, money, notify); Django loads them from here."""

from accounting.money.models import (
    ChargePolicy,
    EnergyTariff,
    LedgerEntry,
    LedgerKind,
    MoneyChange,
    Quota,
    RateCard,
    Statement,
    StatementStatus,
    UnallocatedPolicy,
)
from accounting.notify.models import (
    DeliveryStatus,
    DigestSent,
    Notification,
    Subscription,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookPreset,
)
from accounting.usage.models import (
    DailyEnergy,
    DailyUnplacedUsage,
    DailyUsage,
    UsageAggregateState,
    UsageDirty,
    UsageState,
)

__all__ = [
    "ChargePolicy",
    "DailyEnergy",
    "DailyUnplacedUsage",
    "DailyUsage",
    "DeliveryStatus",
    "DigestSent",
    "EnergyTariff",
    "LedgerEntry",
    "LedgerKind",
    "MoneyChange",
    "Notification",
    "Quota",
    "RateCard",
    "Statement",
    "StatementStatus",
    "Subscription",
    "UnallocatedPolicy",
    "UsageAggregateState",
    "UsageDirty",
    "UsageState",
    "WebhookDelivery",
    "WebhookEndpoint",
    "WebhookPreset",
]
