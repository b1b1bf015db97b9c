"""Backfill of the tables 0012 added (issue 14): days aggregated before it have daily usage but no hourly or
holders' rows, so their boards would be empty. Rather than aggregating here (slow, and under the migration's
lock), this marks those days for the next ``usage_process`` run, which recomputes them in full.

The cheapest marks that make it redo whole days: for each run of consecutive days to redo, one range per
node (a node's mark recomputes all its GPUs) and one unplaced range (both ids empty: the unplaced jobs'
usage and holders' rows). A day that already has hourly rows is not marked; an empty database gets none."""

from itertools import groupby

from django.db import migrations

from core.timeutils import business_day_bounds


def day_runs(days):
    """``[(first, last)]`` of the runs of consecutive dates in sorted ``days``."""
    runs = []
    for _offset, run in groupby(enumerate(days), key=lambda item: item[1].toordinal() - item[0]):
        run = [day for _n, day in run]
        runs.append((run[0], run[-1]))
    return runs


def mark_days_without_detail(apps, schema_editor):
    daily = apps.get_model("accounting", "DailyUsage")
    hourly = apps.get_model("accounting", "HourlyUsage")
    dirty = apps.get_model("accounting", "UsageDirty")
    node = apps.get_model("cluster", "Node")
    db = schema_editor.connection.alias
    days = list(
        daily.objects.using(db).exclude(day__in=hourly.objects.using(db).values("day"))
        .order_by("day").values_list("day", flat=True).distinct()
    )
    if not days:
        return
    node_ids = list(node.objects.using(db).order_by("pk").values_list("pk", flat=True))
    marks = []
    for first, last in day_runs(days):
        lo, _ = business_day_bounds(first)
        _, hi = business_day_bounds(last)
        marks.extend(dirty(node_id=node_id, lo=lo, hi=hi) for node_id in node_ids)
        marks.append(dirty(lo=lo, hi=hi))  # unplaced
    dirty.objects.using(db).bulk_create(marks, batch_size=5000)


class Migration(migrations.Migration):

    dependencies = [
        ("accounting", "0012_hourly_and_holder_usage"),
    ]

    operations = [
        migrations.RunPython(mark_days_without_detail, migrations.RunPython.noop),
    ]
