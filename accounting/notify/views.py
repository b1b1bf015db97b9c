"""The in-app notification list (DESIGN.md §6): newest first, unread marked; mark one or all read; turn the
weekly report e-mail on or off."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.utils import timezone

from accounting.models import Notification, WeeklyReportOptOut


@login_required
def notification_list(request):
    mine = Notification.objects.filter(user=request.user)
    if request.method == "POST" and "weekly_report" in request.POST:
        # "off" opts out (one row per person); anything else turns the report back on
        if request.POST["weekly_report"] == "off":
            WeeklyReportOptOut.objects.get_or_create(user=request.user, defaults={"created_at": timezone.now()})
        else:
            WeeklyReportOptOut.objects.filter(user=request.user).delete()
        return redirect("accounting:notifications")
    if request.method == "POST":
        unread = mine.unread()
        if "notification" in request.POST:
            unread = unread.filter(pk=request.POST["notification"]) if request.POST["notification"].isdigit() else unread.none()
        unread.update(read_at=timezone.now())
        return redirect("accounting:notifications")
    page = Paginator(mine.select_related("alert").order_by("-created_at", "-pk"), 50).get_page(request.GET.get("page"))
    return render(request, "accounting/notifications.html", {
        "page": page, "notifications": page.object_list,
        "weekly_report_on": not WeeklyReportOptOut.objects.filter(user=request.user).exists(),
    })
