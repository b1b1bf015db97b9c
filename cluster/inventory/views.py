from datetime import timedelta

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render
from django.utils import timezone
from django.utils.translation import gettext

from cluster.inventory.filters import FIRST_DAY, NodeDayForm, NodeFilterForm, nodes_with_gpus
from cluster.inventory.holders import HolderState, attach_holders
from cluster.inventory.selectors import inventory_summary
from cluster.telemetry import charts
from cluster.telemetry.models import clock_skewed_annotation
from cluster.telemetry.selectors import (
    gpu_activity,
    node_day_series,
    node_gpu_labels,
    node_health,
    still_filling_from,
)
from core.timeutils import business_day_bounds, business_today, epoch_ms

HEATMAP_BUCKET_MINUTES = 10


def _legend() -> list[tuple[str, str]]:
    return [(str(state.label), state.colour) for state in HolderState]


@login_required
def inventory(request):
    """Every node with its GPUs, status and last contact, and who holds each GPU now and how busy it is;
    filters by pool, GPU model and status."""
    form = NodeFilterForm(request.GET or None).with_pool_choices()
    nodes = nodes_with_gpus().annotate(clock_skewed=clock_skewed_annotation())
    if form.is_bound and form.is_valid():
        nodes = form.filter(nodes)
    nodes = list(nodes)
    attach_holders(request.user, nodes, now=timezone.now())
    return render(request, "cluster/inventory.html", {
        "form": form, "nodes": nodes, "summary": inventory_summary(nodes), "filtered": form.is_bound,
        "legend": _legend(),
    })


@login_required
def node_detail(request, hostname: str):
    """A node's GPUs with who holds each now, its agent's health and alerts, and a GPU × time heatmap of
    utilization and of memory for one day."""
    node = get_object_or_404(nodes_with_gpus(), hostname=hostname)
    now = timezone.now()
    today = business_today(now=now)
    form = NodeDayForm(request.GET or None)
    day = form.chosen_day(today=today)
    form.initial["day"] = day  # what the date input shows when no (valid) day was asked for
    day_start, day_end = business_day_bounds(day)
    attach_holders(request.user, [node], now=now)
    labels = node_gpu_labels(node)
    series = node_day_series(node, day_start, day_end, labels=labels)
    health = node_health(node)
    text = charts.chart_text()
    common = {
        "day_ms": (epoch_ms(day_start), epoch_ms(day_end)),
        "rows": list(labels.values()),
        "until_ms": epoch_ms(now),
        "partial_after_ms": epoch_ms(still_filling_from(health.data_complete_to, now=now)),
        "bucket_minutes": HEATMAP_BUCKET_MINUTES,
        "display_zone": timezone.get_current_timezone(),
        "text": text,
    }
    largest_mib = max((gpu.memory_mib for gpu in node.whole_gpus), default=0)
    activity = gpu_activity(labels, day_start, day_end)
    minutes = {"minutes": HEATMAP_BUCKET_MINUTES}
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
        "legend": _legend(),
        "gpu_rows": [row for gpu in node.whole_gpus for row in (gpu, *gpu.slices)],
        "bucket_minutes": HEATMAP_BUCKET_MINUTES,
        "activity_rows": [(label, activity.get(gpu_id)) for gpu_id, label in labels.items()],
        "utilization_chart": charts.utilization_heatmap(
            series, title=gettext("How busy was each GPU? Mean utilization per %(minutes)s minutes") % minutes,
            **common,
        ),
        "memory_chart": charts.memory_heatmap(
            series, title=gettext("How much memory did each GPU use? Peak per %(minutes)s minutes") % minutes,
            y_max_gib=largest_mib / charts.MIB_PER_GIB, **common,
        ),
    })
