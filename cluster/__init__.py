"""The cluster app (floor 4): the machines and what ran on them, in domain packages: inventory, status,
telemetry, jobs and bookings."""
