from accounting.models.money import (
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
from accounting.models.teams import Membership, Project, Team
from accounting.models.tokens import ApiToken
from accounting.models.usage import (
    DailyEnergy,
    DailyUnplacedUsage,
    DailyUsage,
    UsageAggregateState,
    UsageDirty,
    UsageState,
)

__all__ = [
    "ApiToken",
    "ChargePolicy",
    "DailyEnergy",
    "DailyUnplacedUsage",
    "DailyUsage",
    "EnergyTariff",
    "LedgerEntry",
    "LedgerKind",
    "Membership",
    "MoneyChange",
    "Project",
    "Quota",
    "RateCard",
    "Statement",
    "StatementStatus",
    "Team",
    "UnallocatedPolicy",
    "UsageAggregateState",
    "UsageDirty",
    "UsageState",
]
