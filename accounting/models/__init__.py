from accounting.models.teams import Membership, Project, Team
from accounting.models.tokens import ApiToken
from accounting.models.usage import (
    DailyUnplacedUsage,
    DailyUsage,
    UsageAggregateState,
    UsageDirty,
    UsageState,
)

__all__ = [
    "ApiToken", "DailyUnplacedUsage", "DailyUsage", "Membership", "Project", "Team", "UsageAggregateState",
    "UsageDirty", "UsageState",
]
