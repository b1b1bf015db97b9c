"""What every app shares and that knows no domain (floor 2 of docs/architecture.md): the clock and business
calendar, the time window, units and ticks, money helpers, locks, crypto, API plumbing, coloured choices."""
