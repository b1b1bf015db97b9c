"""Triggers that mark what usage must be recomputed, whatever path writes (the collector's rollups,
job imports, observed usage, bookings, the admin, raw SQL): one statement-level trigger per table and
event, reading the statement's transition table, so a million-row rollup insert adds one grouped
INSERT, not a million."""

from django.db import migrations

MARK = "INSERT INTO accounting_usagedirty (gpu_id, node_id, lo, hi, marked_at) "

FUNCTIONS = {
    # Rollups of a minute changed: that minute of that GPU.
    "cardhour_usage_mark_rollups": MARK + """
        SELECT gpu_id, NULL, min(bucket), max(bucket) + interval '1 minute', now() FROM changed GROUP BY gpu_id""",
    # An allocation's range (a running one up to now); unplaced ones (no GPU) mark unplaced usage.
    "cardhour_usage_mark_allocations": MARK + """
        SELECT gpu_id, NULL, min(start), max(coalesce("end", greatest(start, now()))), now()
        FROM changed GROUP BY gpu_id""",
    # A job's team or project changed: the ranges of its allocations.
    "cardhour_usage_mark_jobs": MARK + """
        SELECT a.gpu_id, NULL, min(a.start), max(coalesce(a."end", greatest(a.start, now()))), now()
        FROM changed j JOIN cluster_allocation a ON a.job_id = j.id GROUP BY a.gpu_id""",
    # A booking's or a maintenance window's hold on a GPU.
    "cardhour_usage_mark_holds": MARK + """
        SELECT gpu_id, NULL, min(lower(during)), max(upper(during)), now() FROM changed GROUP BY gpu_id""",
    # A node's status history: its GPUs over the period (an open one up to now).
    "cardhour_usage_mark_status": MARK + """
        SELECT NULL, node_id, min(started_at), max(coalesce(ended_at, greatest(started_at, now()))), now()
        FROM changed GROUP BY node_id""",
}
TABLES = {
    "cluster_minuterollup": ("cardhour_usage_mark_rollups", ["INSERT", "UPDATE"]),
    "cluster_allocation": ("cardhour_usage_mark_allocations", ["INSERT", "UPDATE", "DELETE"]),
    "cluster_job": ("cardhour_usage_mark_jobs", ["UPDATE"]),
    "cluster_gpuhold": ("cardhour_usage_mark_holds", ["INSERT", "UPDATE", "DELETE"]),
    "cluster_nodestatusperiod": ("cardhour_usage_mark_status", ["INSERT", "UPDATE", "DELETE"]),
}


def _sql() -> tuple[list[str], list[str]]:
    forward, backward = [], []
    for name, body in FUNCTIONS.items():
        forward.append(
            f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body}; "
            "RETURN NULL; END $$"
        )
        backward.append(f"DROP FUNCTION IF EXISTS {name}()")
    for table, (function, events) in TABLES.items():
        for event in events:
            tables = {"INSERT": ["NEW"], "UPDATE": ["OLD", "NEW"], "DELETE": ["OLD"]}[event]
            if table == "cluster_job":
                tables = ["NEW"]  # a job's allocations are where they were; only its team may have moved
            for which in tables:
                trigger = f"usage_mark_{table.removeprefix('cluster_')}_{event.lower()}_{which.lower()}"
                forward.append(
                    f"CREATE TRIGGER {trigger} AFTER {event} ON {table} REFERENCING {which} TABLE AS changed "
                    f"FOR EACH STATEMENT EXECUTE FUNCTION {function}()"
                )
                backward.insert(0, f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
    return forward, backward


FORWARD, BACKWARD = _sql()


class Migration(migrations.Migration):
    dependencies = [("accounting", "0003_usage"), ("cluster", "0007_bookings")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
