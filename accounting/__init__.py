"""The accounting app (floor 5): what the card-hours mean, in domain packages: usage, quotas, money, notify
and the team pages."""
