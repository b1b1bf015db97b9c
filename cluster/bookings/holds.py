"""Reads of GPU holds for bookings (DESIGN.md §6): which GPUs may be booked, which holds are in the way,
and how a refusal names them. The writes (``services.py``), the slot search (``selectors.py``), the
admin and the usage report share these.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db.models import BigIntegerField, Func
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.translation import gettext as _

from cluster.bookings.slots import Candidate
from cluster.choices import GpuStatus, NodeStatus
from cluster.models import Gpu, GpuHold, GpuModel, HoldKind, Node

# --- GPUs that may be booked ---------------------------------------------------------------------------


def bookable_gpus():
    """Whole GPUs that bookings may take: active GPUs on nodes that are not in maintenance or retired."""
    return Gpu.objects.filter(mig_parent__isnull=True, status=GpuStatus.ACTIVE).exclude(
        node__status__in=NodeStatus.set_by_admins()
    )


def candidate_gpus(gpu_model: GpuModel) -> list[Candidate]:
    rows = bookable_gpus().filter(model=gpu_model, node__status=NodeStatus.UP).values_list(
        "pk", "node_id", "node__hostname", "index"
    )
    return [Candidate(*row) for row in rows]


def node_gpu_ids(node: Node) -> list[int]:
    """The node's whole GPUs that are not retired: what a maintenance window holds."""
    gpus = Gpu.objects.filter(node=node, mig_parent__isnull=True).exclude(status=GpuStatus.RETIRED)
    return list(gpus.values_list("pk", flat=True))


# --- Holds in the way ----------------------------------------------------------------------------------


def busy_ranges(gpu_ids: Sequence[int], start: datetime, end: datetime) -> dict[int, list[tuple[int, int]]]:
    """[lo, hi) in epoch seconds of every active hold on ``gpu_ids`` that overlaps ``[start, end)``, by GPU."""
    busy: dict[int, list[tuple[int, int]]] = {}
    # Bounds as integers: parsing 20,000 timestamps costs far more than the query and the search.
    rows = GpuHold.objects.overlapping(start, end).filter(gpu_id__in=gpu_ids).values_list(
        "gpu_id", RangeBoundEpoch("during", function="lower"), RangeBoundEpoch("during", function="upper"),
    )
    for gpu_id, lo, hi in rows:
        busy.setdefault(gpu_id, []).append((lo, hi))
    return busy


class RangeBoundEpoch(Func):
    """A bound of a tstzrange (``function`` lower or upper) as whole epoch seconds."""

    template = "floor(extract(epoch from %(function)s(%(expressions)s)))::bigint"
    output_field = BigIntegerField()


def first_conflict(gpu_ids: Sequence[int], start: datetime, end: datetime, *, exclude_booking: int | None = None):
    holds = GpuHold.objects.overlapping(start, end).filter(gpu_id__in=gpu_ids).select_related("gpu__node", "team")
    if exclude_booking is not None:
        holds = holds.exclude(booking_id=exclude_booking)
    return holds.order_by("during", "gpu__node__hostname", "gpu__index").first()


# --- How a refusal names them --------------------------------------------------------------------------


def local_span(start: datetime, end: datetime) -> str:
    """``2026-11-02 10:00–12:00 (UTC)`` in the display zone, for messages."""
    zone = timezone.get_current_timezone()
    lo, hi = timezone.localtime(start, zone), timezone.localtime(end, zone)
    tail = date_format(hi, "H:i") if lo.date() == hi.date() else date_format(hi, "Y-m-d H:i")
    return f"{date_format(lo, 'Y-m-d H:i')}–{tail} ({zone})"


def hold_conflict_message(hold: GpuHold) -> str:
    """What a 409 says about the hold in the way: its GPU, its time and its team; nothing private."""
    span = local_span(hold.during.lower, hold.during.upper)
    if hold.kind == HoldKind.MAINTENANCE:
        return _("GPU %(gpu)s is in maintenance %(span)s.") % {"gpu": hold.gpu, "span": span}
    return _("GPU %(gpu)s is booked %(span)s by team %(team)s.") % {"gpu": hold.gpu, "span": span, "team": hold.team}
