from django.contrib import admin

from cluster.models import Alert, NodeStatusPeriod


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ["opened_at", "tier", "kind", "subject_label", "last_seen_at", "closed_at"]
    list_filter = ["tier", "kind", "subject_type"]
    search_fields = ["subject_label", "message"]
    readonly_fields = [f.name for f in Alert._meta.fields]

    def has_add_permission(self, request):
        return False

@admin.register(NodeStatusPeriod)
class NodeStatusPeriodAdmin(admin.ModelAdmin):
    """The history is written by status changes (collector, admin edits of a node), never by hand."""

    list_display = ["node", "status", "started_at", "ended_at", "reason"]
    list_filter = ["status"]
    search_fields = ["node__hostname"]
    readonly_fields = ["node", "status", "started_at", "ended_at", "reason"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
