"""Admin for teams and people. Every change to a membership or a person's roles goes through
``teams.services``, so it is audited in the admin's transaction; the audit trail itself is read-only
(teams/audit/admin.py)."""

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.db import transaction

from teams.audit import admin as audit_admin  # noqa: F401 (registers the audit trail)
from teams.models import ApiToken, Membership, Project, Team
from teams.services import (
    membership_delete,
    membership_save,
    roles_record,
    stored_roles,
    team_delete,
    user_delete,
    user_roles,
)


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

    def save_formset(self, request, form, formset, change):
        if formset.model is not Membership:
            return super().save_formset(request, form, formset, change)
        memberships = formset.save(commit=False)
        for membership in formset.deleted_objects:
            membership_delete(user=request.user, membership=membership)
        for membership in memberships:
            membership_save(user=request.user, membership=membership)
        return memberships

    def delete_model(self, request, obj):
        team_delete(user=request.user, team=obj)

    def delete_queryset(self, request, queryset):
        for team in queryset:
            team_delete(user=request.user, team=team)


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

    def save_model(self, request, obj, form, change):
        membership_save(user=request.user, membership=obj)

    def delete_model(self, request, obj):
        membership_delete(user=request.user, membership=obj)

    def delete_queryset(self, request, queryset):
        for membership in queryset.select_related("user", "team"):
            membership_delete(user=request.user, membership=membership)


User = get_user_model()
admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class AuditedUserAdmin(UserAdmin):
    """Django's user admin; a change to a person's global roles (superuser, staff, groups) is recorded once
    the groups are saved, and a deletion records the memberships and roles it removes."""

    def save_model(self, request, obj, form, change):
        obj._roles_before = stored_roles(obj.pk)
        super().save_model(request, obj, form, change)

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        member = form.instance
        before = getattr(member, "_roles_before", None)
        if before is not None or user_roles(member) != {"is_superuser": False, "is_staff": False, "groups": []}:
            roles_record(user=request.user, member=member, before=before)

    def delete_model(self, request, obj):
        user_delete(user=request.user, member=obj)

    def delete_queryset(self, request, queryset):
        for member in queryset:
            user_delete(user=request.user, member=member)


@admin.register(Group)
class AuditedGroupAdmin(GroupAdmin):
    """Django's group admin; renaming or deleting a group (admin, finance) changes its members' roles,
    each recorded."""

    @transaction.atomic
    def _with_members(self, request, group, change):
        members = list(group.user_set.all()) if group.pk else []
        before = {member.pk: user_roles(member) for member in members}
        change()
        for member in members:
            roles_record(user=request.user, member=member, before=before[member.pk])

    def save_model(self, request, obj, form, change):
        self._with_members(request, obj, lambda: super(AuditedGroupAdmin, self).save_model(request, obj, form, change))

    def delete_model(self, request, obj):
        self._with_members(request, obj, lambda: obj.delete())

    def delete_queryset(self, request, queryset):
        for group in queryset:
            self.delete_model(request, group)


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
