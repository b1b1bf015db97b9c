"""The audit trail (issue 17): one row per change to memberships, roles, node tokens, bookings, rate cards,
tariffs, the charge policy, quotas and period closes, and the database grants that keep it (and the ledger)
append-only for the application's role. It lives on the teams floor so that every writer above may use it."""
