"""The in-app notification list (DESIGN.md §6): newest first, unread marked; mark one or all read."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.utils import timezone

from accounting.models import Notification


@login_required
def notification_list(request):
    mine = Notification.objects.filter(user=request.user)
    if request.method == "POST":
        unread = mine.unread()
        if "notification" in request.POST:
            unread = unread.filter(pk=request.POST["notification"]) if request.POST["notification"].isdigit() else unread.none()
        unread.update(read_at=timezone.now())
        return redirect("accounting:notifications")
    page = Paginator(mine.select_related("alert").order_by("-created_at", "-pk"), 50).get_page(request.GET.get("page"))
    return render(request, "accounting/notifications.html", {"page": page, "notifications": page.object_list})
