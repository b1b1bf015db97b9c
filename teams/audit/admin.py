"""The audit trail in the Django admin: a read-only list for admins, filtered by kind, who and when. Rows
are never added, changed or deleted here (nor anywhere: see teams.audit.grants)."""

from django.contrib import admin

from teams.audit.models import AuditEntry
from teams.roles import is_admin


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ["changed_at", "actor", "kind", "subject", "team"]
    list_filter = ["kind", "actor", "changed_at"]
    list_select_related = ["team"]
    search_fields = ["subject", "actor"]
    date_hierarchy = "changed_at"
    fields = ["changed_at", "actor", "changed_by", "kind", "object_id", "team", "subject", "before", "after"]
    readonly_fields = fields
    show_full_result_count = False

    def has_module_permission(self, request):
        return is_admin(request.user)

    def has_view_permission(self, request, obj=None):
        return is_admin(request.user)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
