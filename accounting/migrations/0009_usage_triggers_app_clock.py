"""The usage triggers without the database's clock (issue 12): a range still open (a running job, a
node still down) is marked with an open end, ``hi`` NULL, and ``usage_process`` reads NULL as "up to the
application's now", so a frozen application clock freezes the decisions too. ``marked_at`` stays a
plain timestamp of when the mark was written, for people; no decision reads it.

Marks are also held to the supported time window (core.timewindow): an allocation that begins outside
it is not counted by the aggregation (its job is reported instead), so it marks nothing, and the other
ranges are clamped, so a stored year-1 row never asks for 700,000 days to be recomputed."""

from django.db import migrations, models

# ruff: noqa: S608 (the SQL is built from the constants above; a trigger binds no values)

WINDOW_START = "'2000-01-01T00:00:00+00:00'::timestamptz"
WINDOW_END = "'2100-01-01T00:00:00+00:00'::timestamptz"

MARK = "INSERT INTO accounting_usagedirty (gpu_id, node_id, lo, hi, marked_at) "


def _lo(expression: str) -> str:
    return f"greatest(min({expression}), {WINDOW_START})"


def _hi(expression: str) -> str:
    """The latest end of the group, or NULL (open) when one of them is open."""
    return f"CASE WHEN bool_or({expression} IS NULL) THEN NULL ELSE least(max({expression}), {WINDOW_END}) END"


# An allocation the aggregation counts (accounting.usage.inputs.counted_in_window): it begins in the window
# and does not end after it.
ALLOCATION_IN_WINDOW = (f'{{a}}start >= {WINDOW_START} AND {{a}}start < {WINDOW_END} '
                        f'AND ({{a}}"end" IS NULL OR {{a}}"end" <= {WINDOW_END})')

FUNCTIONS = {
    "cardhour_usage_mark_rollups": MARK + f"""
        SELECT gpu_id, NULL, {_lo("bucket")}, least(max(bucket) + interval '1 minute', {WINDOW_END}), now()
        FROM changed WHERE bucket >= {WINDOW_START} AND bucket < {WINDOW_END} GROUP BY gpu_id""",
    "cardhour_usage_mark_allocations": MARK + f"""
        SELECT gpu_id, NULL, min(start), {_hi('"end"')}, now()
        FROM changed WHERE {ALLOCATION_IN_WINDOW.format(a="")} GROUP BY gpu_id""",
    "cardhour_usage_mark_jobs": MARK + f"""
        SELECT a.gpu_id, NULL, min(a.start), {_hi('a."end"')}, now()
        FROM changed j JOIN cluster_allocation a ON a.job_id = j.id
        WHERE {ALLOCATION_IN_WINDOW.format(a="a.")} GROUP BY a.gpu_id""",
    "cardhour_usage_mark_holds": MARK + f"""
        SELECT gpu_id, NULL, {_lo("lower(during)")}, least(max(upper(during)), {WINDOW_END}), now()
        FROM changed WHERE lower(during) < {WINDOW_END} AND upper(during) > {WINDOW_START} GROUP BY gpu_id""",
    "cardhour_usage_mark_status": MARK + f"""
        SELECT NULL, node_id, {_lo("started_at")}, {_hi("ended_at")}, now()
        FROM changed WHERE started_at < {WINDOW_END} AND (ended_at IS NULL OR ended_at > {WINDOW_START})
        GROUP BY node_id""",
}


def _replace(functions: dict[str, str]) -> list[str]:
    return [
        f"CREATE OR REPLACE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body}; RETURN NULL; END $$"
        for name, body in functions.items()
    ]


def _previous() -> list[str]:
    from importlib import import_module

    previous = import_module("accounting.migrations.0004_usage_triggers")
    return _replace(previous.FUNCTIONS)


class Migration(migrations.Migration):
    dependencies = [("accounting", "0008_notifications")]

    operations = [
        # Marks written under the old functions: an open end was "now" at the time (a closed range), so
        # they stay valid as they are.
        migrations.AlterField(
            model_name="usagedirty", name="hi",
            field=models.DateTimeField(blank=True, null=True, help_text=(
                "End of the range (exclusive); empty for a range still open (a running job): up to the "
                "application's now when it is recomputed.")),
        ),
        migrations.AlterField(
            model_name="usagedirty", name="marked_at",
            field=models.DateTimeField(auto_now_add=True, help_text=(
                "When the mark was written (the database's clock; shown to people, never decides anything).")),
        ),
        migrations.RunSQL(_replace(FUNCTIONS), _previous()),
    ]
