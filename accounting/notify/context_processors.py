"""The header's unread-notifications badge."""

from accounting.models import Notification


def notifications_unread(request):
    """The signed-in person's unread notifications count for the header badge (one COUNT query)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"notifications_unread": 0}
    return {"notifications_unread": Notification.objects.filter(user=user, read_at__isnull=True).count()}
