"""PostgreSQL error codes (SQLSTATE) that services act on."""

EXCLUSION_VIOLATION = "23P01"  # an exclusion constraint refused an overlapping row
DEADLOCK_DETECTED = "40P01"  # PostgreSQL chose this transaction to break a deadlock
