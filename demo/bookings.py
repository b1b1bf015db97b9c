"""A week of demo bookings (this week and the start of the next, in the display zone) and two maintenance
windows, made through the booking services so they obey every rule: a firmware update of a few hours,
and the week of the node that the demo puts in maintenance (:data:`MAINTENANCE_NODE`), from this
week's Monday, where the booking calendar draws it down. The usage history (demo/history.py) reads
the windows back: the nodes are in maintenance during them and run nothing. Loading again adds only
what is missing; a slot someone has booked since is skipped.

LLM Training has a guaranteed share of H200s on weekdays' working hours (issue 19, :data:`GUARANTEES`), made
before the plan so that the plan's bookings are checked against it as any booking is."""

from __future__ import annotations

import contextlib
from datetime import datetime, time, timedelta

from django.contrib.auth import get_user_model
from django.utils import timezone

from cluster.bookings.services import BookingRefused, booking_create, maintenance_create
from cluster.models import Booking, Gpu, GpuModel, GuaranteeDays, MaintenanceWindow, Node, TeamGuarantee
from teams.models import Project, Team

NOTE = "Demo: "
# day offset from Monday, start hour, hours, team slug, booker, project slug, what: ("node", host) or
# ("gpus", host, [indices]), purpose
PLAN = [
    (0, 9, 60, "llm", "lead-llm", "pretraining", ("node", "gpu-h200-01"), "7B pretraining run"),
    (0, 10, 8, "vision", "eng-vision", "detection", ("gpus", "gpu-h100-02", [0, 1]), "notebook session"),
    (1, 10, 8, "vision", "eng-vision", "detection", ("gpus", "gpu-h100-02", [0, 1]), "notebook session"),
    (2, 10, 8, "vision", "eng-vision", "detection", ("gpus", "gpu-h100-02", [0, 1]), "notebook session"),
    (0, 0, 168, "inference", "lead-inference", "serving", ("gpus", "gpu-l40s-01", [0, 1, 2, 3]), "staging endpoints"),
    (1, 14, 6, "llm", "eng-llm", "alignment", ("gpus", "gpu-h200-02", [0, 1]), "reward model"),
    (3, 8, 30, "llm", "eng-llm", "alignment", ("gpus", "gpu-h200-02", [0, 1, 2, 3]), "DPO run"),
    (4, 12, 54, "vision", "lead-vision", "video-generation", ("gpus", "gpu-h200-03", [0, 1, 2, 3]), "video model"),
    (5, 9, 12, "inference", "lead-inference", "evaluation", ("gpus", "gpu-h100-01", [4, 5]), "benchmark suite"),
    (7, 9, 24, "llm", "lead-llm", "pretraining", ("node", "gpu-h200-01"), "resume pretraining"),
    (8, 10, 8, "vision", "eng-vision", "detection", ("gpus", "gpu-h100-02", [0, 1]), "notebook session"),
]
# team slug, GPU model, GPUs, days, from, until (business zone)
GUARANTEES = [("llm", "H200", 8, GuaranteeDays.WEEKDAYS, time(9), time(18))]
MAINTENANCE_NODE = "gpu-l40s-02"  # in maintenance (demo/cluster.py) since this week's Monday
# host, day offset from Monday, start hour, hours, reason
MAINTENANCE = [
    ("gpu-h200-04", 1, 2, 4, "Firmware update"),
    (MAINTENANCE_NODE, 0, 0, 7 * 24, "GPU baseboard replacement"),
]


def week_start(moment: datetime) -> datetime:
    """Monday 00:00 of ``moment``'s week in the display zone, as an aware datetime."""
    local = timezone.localtime(moment)
    return (local - timedelta(days=local.weekday())).replace(hour=0, minute=0, second=0, microsecond=0)


def load_demo_bookings(*, now: datetime | None = None) -> int:
    """Book the plan for ``now``'s week; returns how many bookings were made."""
    now = now or timezone.now()
    monday = week_start(now)
    users = {user.username: user for user in get_user_model().objects.filter(username__in={p[4] for p in PLAN})}
    teams = {team.slug: team for team in Team.objects.all()}
    for slug, model, gpus, days, start_time, end_time in GUARANTEES:
        gpu_model = GpuModel.objects.filter(short_name=model).first()
        if slug in teams and gpu_model is not None:
            TeamGuarantee.objects.get_or_create(team=teams[slug], gpu_model=gpu_model, defaults={
                "gpus": gpus, "days": days, "start_time": start_time, "end_time": end_time})
    made = 0
    for day, hour, hours, slug, username, project, what, purpose in PLAN:
        start = monday + timedelta(days=day, hours=hour)
        end = start + timedelta(hours=hours)
        if Booking.objects.filter(note=NOTE + purpose, start__gte=start - timedelta(minutes=30), start__lte=start).exists():
            continue
        if slug not in teams or username not in users:
            continue
        team = teams[slug]
        target = {"node": Node.objects.get(hostname=what[1])} if what[0] == "node" else {
            "gpus": list(Gpu.objects.filter(node__hostname=what[1], index__in=what[2], mig_parent__isnull=True))
        }
        try:
            booking_create(
                user=users[username], team=team, project=Project.objects.filter(team=team, slug=project).first(),
                start=start, end=end, note=NOTE + purpose, now=min(now, start), **target,
            )
        except BookingRefused:
            continue  # that slot was taken since (or the week is past the horizon): leave it
        made += 1
    for host, day, hour, hours, reason in MAINTENANCE:
        start = monday + timedelta(days=day, hours=hour)
        node = Node.objects.get(hostname=host)
        if not MaintenanceWindow.objects.filter(node=node, start=start).exists():
            with contextlib.suppress(BookingRefused):
                maintenance_create(node=node, start=start, end=start + timedelta(hours=hours), reason=reason)
    return made
