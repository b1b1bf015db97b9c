from django.contrib import admin

from teams.models import ApiToken, Membership, Project, Team


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]


class ProjectInline(admin.TabularInline):
    model = Project
    extra = 0
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "cost_centre"]
    search_fields = ["name", "slug", "cost_centre"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, ProjectInline]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "team", "active"]
    list_filter = ["team", "active"]
    search_fields = ["name"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "team", "role"]
    list_filter = ["team", "role"]
    autocomplete_fields = ["user"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are issued by their owners (or ``manage.py create_api_token``); admins see and revoke them.
    The raw token is never stored, so it cannot be shown here."""

    list_display = ["name", "user", "kind", "display_prefix", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_filter = ["kind"]
    search_fields = ["name", "user__username"]
    fields = ["user", "name", "kind", "display_prefix", "created_at", "last_used_at", "expires_at", "revoked_at"]
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request, queryset):
        for token in queryset:
            token.revoke()

    actions = ["revoke"]

# Money and alert delivery have their own admin modules (accounting/money/admin.py,
# accounting/notify/admin.py); importing them registers them.
