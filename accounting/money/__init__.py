"""Money: rate cards, energy tariffs, the charge policy, monthly close and reopen, statements and their
exports, and the finance page."""
