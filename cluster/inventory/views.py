from datetime import timedelta

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.translation import gettext

from cluster.inventory.filters import FIRST_DAY, NodeDayForm, NodeFilterForm, nodes_with_gpus
from cluster.inventory.selectors import inventory_summary
from cluster.telemetry import charts
from cluster.telemetry.selectors import node_day_series, node_health, still_filling_from
from core.timeutils import business_day_bounds, business_today, epoch_ms


@login_required
def inventory(request):
    """Every node with its GPUs, status and last contact; filters by pool, GPU model and status."""
    form = NodeFilterForm(request.GET or None).with_pool_choices()
    nodes = nodes_with_gpus()
    if form.is_bound and form.is_valid():
        nodes = form.filter(nodes)
    nodes = list(nodes)
    return render(
        request, "cluster/inventory.html",
        {"form": form, "nodes": nodes, "summary": inventory_summary(nodes), "filtered": form.is_bound},
    )


@login_required
def node_detail(request, hostname: str):
    """A node's GPUs, its agent's health and alerts, and per-GPU utilization and memory for one day."""
    node = get_object_or_404(nodes_with_gpus(), hostname=hostname)
    now = timezone.now()
    today = business_today(now=now)
    form = NodeDayForm(request.GET or None)
    day = form.chosen_day(today=today)
    form.initial["day"] = day  # what the date input shows when no (valid) day was asked for
    day_start, day_end = business_day_bounds(day)
    series = node_day_series(node, day_start, day_end)
    health = node_health(node)
    common = {
        "partial_after_ms": epoch_ms(still_filling_from(health.data_complete_to, now=now)),
        "x_range_ms": (epoch_ms(day_start), epoch_ms(day_end)),
        "display_zone": timezone.get_current_timezone(),
        "text": charts.chart_text(),
    }
    largest_mib = max((gpu.memory_mib for gpu in node.whole_gpus), default=0)
    return render(request, "cluster/node_detail.html", {
        "node": node,
        "form": form,
        "day": day,
        "business_zone": settings.CARDHOUR_BUSINESS_TIME_ZONE,
        "day_start": day_start,
        "day_end": day_end,
        "previous_day": day - timedelta(days=1) if day > FIRST_DAY else None,
        "next_day": day + timedelta(days=1) if day < today else None,
        "is_today": day == today,
        "health": health,
        "utilization_chart": charts.utilization_figure(series, title=gettext("GPU utilization"), **common),
        "memory_chart": charts.memory_figure(
            series, title=gettext("GPU memory used"), y_max_gib=largest_mib / charts.MIB_PER_GIB, **common
        ),
    })
