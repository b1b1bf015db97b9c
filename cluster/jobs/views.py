"""The jobs pages: a scoped, filtered, sorted and paginated list, and one run's facts, KPIs, allocations
and GPU utilization (DESIGN.md §2, §4).

The list leaves GPU efficiency out: it needs every minute rollup of every listed job's GPUs (a week-long
8-GPU job alone is 80,640 rows), so it is shown on the job's page only, where one query fetches them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from fractions import Fraction

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.translation import gettext, pgettext_lazy
from django.utils.translation import gettext_lazy as _

from cluster.jobs.filters import JOB_DEFAULT_SORT, JobFilterForm
from cluster.jobs.input_bound import input_bound
from cluster.jobs.kpis import card_hours, job_kpis, job_times, percent
from cluster.jobs.selectors import (
    input_bound_rule,
    job_allocations,
    job_minute_utilization,
    job_runs,
    job_usage,
    job_window,
    jobs_for_list,
    minutes_of,
    runs_of,
    spans_of,
)
from cluster.models import Job, JobState
from cluster.telemetry import charts
from cluster.telemetry.selectors import gpu_activity, mean_activity, still_filling_from
from core.timeutils import epoch_ms
from core.units import TICKS_PER_GPU_SECOND

JOBS_PER_PAGE = 50
SORTABLE = (
    ("submit", pgettext_lazy("job list column", "Submitted")),
    ("start", pgettext_lazy("job list column", "Started")),
    ("end", pgettext_lazy("job list column", "Ended")),
    ("gpus", pgettext_lazy("job list column", "GPUs")),
    ("state", pgettext_lazy("job list column", "State")),
)


def idle_threshold_pct() -> float:
    """The idle threshold (DESIGN.md §4: default 5 %); ``CARDHOUR_IDLE_THRESHOLD_PCT`` overrides it."""
    return settings.CARDHOUR_IDLE_THRESHOLD_PCT


def duration_text(value: timedelta | None) -> str:
    """``2 d 3 h``, ``1 h 05 min``, ``4 min 09 s``, ``12 s``; ``—`` when unknown."""
    if value is None:
        return "—"
    sign, seconds = ("−", -value) if value < timedelta(0) else ("", value)
    total = int(seconds.total_seconds())
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        text = gettext("%(days)d d %(hours)d h") % {"days": days, "hours": hours}
    elif hours:
        text = gettext("%(hours)d h %(minutes)02d min") % {"hours": hours, "minutes": minutes}
    elif minutes:
        text = gettext("%(minutes)d min %(seconds)02d s") % {"minutes": minutes, "seconds": secs}
    else:
        text = gettext("%(seconds)d s") % {"seconds": secs}
    return sign + text


def gpus_text(share: int) -> str:
    """A share (ticks per second) as GPUs: ``4``, ``0.5``, or ``1/7`` where decimals would round."""
    gpus = Fraction(share, TICKS_PER_GPU_SECOND)
    if 1000 % gpus.denominator == 0:
        return f"{float(gpus):g}" if gpus.denominator > 1 else str(gpus.numerator)
    return f"{gpus.numerator}/{gpus.denominator}"


@dataclass(frozen=True)
class SortHeader:
    """A sortable column's header: its label, the ``sort`` value its link asks for, and its current order."""

    label: str
    next_sort: str
    order: str  # "ascending", "descending" or "" (the aria-sort value)


def sort_headers(sort: str) -> dict[str, SortHeader]:
    headers = {}
    for column, label in SORTABLE:
        if sort == column:
            headers[column] = SortHeader(label, f"-{column}", "ascending")
        elif sort == f"-{column}":
            headers[column] = SortHeader(label, column, "descending")
        else:
            headers[column] = SortHeader(label, column, "")
    return headers


@login_required
def job_list(request):
    """The runs the person may see, filtered, sorted by a whitelisted column, 50 a page."""
    form = JobFilterForm(request.GET or None, user=request.user)
    filters = form.filters()
    page = Paginator(jobs_for_list(request.user, filters), JOBS_PER_PAGE).get_page(request.GET.get("page"))
    now = timezone.now()
    jobs = list(page.object_list)
    for job in jobs:
        times = job_times(
            submit=job.submit_time, start=job.start_time, end=job.end_time, running=job.state == JobState.RUNNING,
            now=now,
        )
        job.queue_wait_text = duration_text(times.queue_wait)
        job.run_time_text = duration_text(times.run_time)
        job.run_time_so_far = times.running
        job.gpus_text = gpus_text(int(job.gpu_count * TICKS_PER_GPU_SECOND)) if job.gpu_count else (
            str(job.placed_gpu_count) if job.placed_gpu_count else "—"
        )
        job.model_text = job.gpu_model.short_name if job.gpu_model else (job.placed_gpu_model or "")
    filter_fields = [form[name] for name in form.fields if name != "sort"]
    return render(request, "cluster/job_list.html", {
        "form": form,
        "filter_fields": filter_fields,
        "jobs": jobs,
        "page": page,
        "sort": filters["sort"],
        "custom_sort": filters["sort"] != JOB_DEFAULT_SORT,
        "headers": sort_headers(filters["sort"]),
        "filtered": bool(request.GET),
    })


def job_chart_text() -> charts.ChartText:
    return charts.chart_text(
        empty=gettext("No samples from this job's GPUs"), no_values=gettext("This job's GPUs reported no utilization")
    )


UNPLACED = _("unplaced")


@login_required
def job_detail(request, pk: int):
    """One run: its facts, KPIs, allocations, other runs and its GPUs' utilization over the run. Another
    team's job is a 404, not a 403: whether it exists is itself private."""
    job = get_object_or_404(Job.objects.visible_to(request.user).select_related("team", "project", "gpu_model"), pk=pk)
    now = timezone.now()
    threshold = idle_threshold_pct()
    allocations = job_allocations(job)
    usage = job_usage(job, now=now)
    runs = job_runs(job, user=request.user)
    running = job.state == JobState.RUNNING
    kpis = job_kpis(
        submit=job.submit_time, start=job.start_time, end=job.end_time, running=running,
        allocations=spans_of(allocations), minutes=minutes_of(usage), runs=runs_of(runs), now=now,
        idle_threshold_pct=threshold,
    )
    for allocation in allocations:
        allocation.gpus_text = gpus_text(allocation.share)
    window = job_window(job, now=now)
    activity = _job_activity(allocations, window)
    chart = charts.job_utilization_figure(
        usage, title=gettext("Utilization of the job's GPUs"), idle_threshold_pct=threshold,
        threshold_label=gettext("idle below %(pct)s %%") % {"pct": f"{threshold:g}"},
        run_ms=(epoch_ms(window[0]), epoch_ms(window[1])) if window else None,
        partial_after_ms=epoch_ms(still_filling_from(None, now=now)) if running and not job.end_time else None,
        display_zone=timezone.get_current_timezone(), text=job_chart_text(),
    )
    usage_kpis = kpis.usage
    shares = {a.gpu_id: a.share for a in allocations if a.gpu_id}
    waiting = input_bound(job_minute_utilization(usage, shares), input_bound_rule())
    return render(request, "cluster/job_detail.html", {
        "job": job,
        "allocations": allocations,
        "runs": runs if len(runs) > 1 else [],
        "times": {
            "queue_wait": duration_text(kpis.times.queue_wait),
            "run_time": duration_text(kpis.times.run_time),
            "run_time_so_far": kpis.times.running,
            "turnaround": duration_text(kpis.times.turnaround),
        },
        "usage": {
            "allocated": card_hours(usage_kpis.allocated_card_hours),
            "busy": card_hours(usage_kpis.busy_card_hours),
            "idle": card_hours(usage_kpis.idle_card_hours),
            "unmeasured": card_hours(usage_kpis.unmeasured_card_hours),
            "efficiency": percent(usage_kpis.efficiency),
        },
        "kpis": kpis,
        "interruptions": {
            "count": kpis.interruptions.count,
            "recoveries": [duration_text(r) for r in kpis.interruptions.recoveries],
            "total_recovery": duration_text(kpis.interruptions.total_recovery),
            "awaiting_recovery": kpis.interruptions.awaiting_recovery,
        },
        "idle_threshold_pct": f"{threshold:g}",
        "utilization_chart": chart,
        "input_bound": waiting,
        **activity,
    })


def _job_activity(allocations, window) -> dict:
    """GPU %, SM activity and occupancy of the job's GPUs over its run, per GPU and for the job (each GPU
    weighted by its measured minutes times its share), for the page to show side by side."""
    placed = {a.gpu_id: a for a in allocations if a.gpu_id}
    if window is None or not placed:
        return {"activity": None, "activity_rows": []}
    start, end = window
    per_gpu = gpu_activity(placed, start.replace(second=0, microsecond=0), end)
    rows = []
    for gpu_id, allocation in placed.items():
        gpu = allocation.gpu
        label = gettext("%(node)s · GPU %(index)s") % {"node": gpu.node.hostname, "index": gpu.index}
        rows.append((f"{label} · {gpu.mig_profile}" if gpu.mig_profile else label, per_gpu.get(gpu_id)))
    shares = {gpu_id: allocation.share / TICKS_PER_GPU_SECOND for gpu_id, allocation in placed.items()}
    return {"activity": mean_activity(per_gpu.values(), shares), "activity_rows": rows}
