"""The team list and each team's page: card-hours, costs, quotas and people."""
