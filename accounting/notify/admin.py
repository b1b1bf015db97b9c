"""Admin for alert delivery: webhook endpoints, subscriptions and weekly report opt-outs are edited here;
notifications, deliveries, digests and weekly reports sent are records, shown read-only."""

from django.contrib import admin

from accounting.models import (
    DigestSent,
    Notification,
    Subscription,
    WebhookDelivery,
    WebhookEndpoint,
    WeeklyReportOptOut,
    WeeklyReportSent,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(admin.ModelAdmin):
    list_display = ["name", "preset", "url", "min_tier", "active"]
    list_filter = ["preset", "min_tier", "active"]
    search_fields = ["name", "url"]

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "url":
            kwargs["assume_scheme"] = "https"
        return super().formfield_for_dbfield(db_field, request, **kwargs)


@admin.register(Subscription)
class SubscriptionAdmin(admin.ModelAdmin):
    list_display = ["user", "subject_type", "subject_id", "kind"]
    list_filter = ["subject_type", "kind"]
    autocomplete_fields = ["user"]


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ["user", "alert", "created_at", "read_at", "emailed_at"]
    list_select_related = ["user", "alert"]
    search_fields = ["user__username"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyAdmin):
    list_display = ["endpoint", "alert", "status", "attempts", "last_error", "created_at", "sent_at"]
    list_filter = ["status", "endpoint"]
    list_select_related = ["endpoint", "alert"]


@admin.register(DigestSent)
class DigestSentAdmin(ReadOnlyAdmin):
    list_display = ["user", "local_day", "sent_at", "notification_count"]


@admin.register(WeeklyReportSent)
class WeeklyReportSentAdmin(ReadOnlyAdmin):
    list_display = ["user", "week_start", "sent_at"]
    list_select_related = ["user"]
    search_fields = ["user__username"]


@admin.register(WeeklyReportOptOut)
class WeeklyReportOptOutAdmin(admin.ModelAdmin):
    list_display = ["user", "created_at"]
    list_select_related = ["user"]
    autocomplete_fields = ["user"]
    search_fields = ["user__username"]
