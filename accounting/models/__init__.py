from accounting.models.teams import Membership, Project, Team
from accounting.models.tokens import ApiToken

__all__ = ["ApiToken", "Membership", "Project", "Team"]
