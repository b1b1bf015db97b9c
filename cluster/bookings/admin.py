"""Admin for bookings: bookings and their holds are read-only here (writes go through the services so
the rules and the exclusion constraint answer clearly); maintenance windows are created through
``maintenance_create``; team booking policies are plain rows."""

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext_lazy as _

from cluster.bookings.holds import first_conflict, hold_conflict_message, node_gpu_ids
from cluster.bookings.services import maintenance_create
from cluster.models import Booking, GpuHold, MaintenanceWindow, TeamBookingPolicy
from teams.audit.models import AuditKind
from teams.audit.records import audit_record, audit_values


class GpuHoldInline(admin.TabularInline):
    model = GpuHold
    fields = ["gpu", "during", "kind", "active"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Booking)
class BookingAdmin(admin.ModelAdmin):
    list_display = ["id", "team", "booker", "gpu_count", "gpu_model", "start", "end", "status"]
    list_filter = ["status", "team", "gpu_model"]
    search_fields = ["booker__username", "team__name", "note"]
    readonly_fields = [f.name for f in Booking._meta.fields]
    inlines = [GpuHoldInline]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class MaintenanceWindowForm(forms.ModelForm):
    class Meta:
        model = MaintenanceWindow
        fields = ["node", "start", "end", "reason"]

    def clean(self):
        cleaned = super().clean()
        node, start, end = cleaned.get("node"), cleaned.get("start"), cleaned.get("end")
        if self.instance.pk is None and node and start and end:
            if end <= start:
                raise ValidationError({"end": _("must be after the start.")})
            if (hold := first_conflict(node_gpu_ids(node), start, end)) is not None:
                raise ValidationError(hold_conflict_message(hold))
        return cleaned


@admin.register(MaintenanceWindow)
class MaintenanceWindowAdmin(admin.ModelAdmin):
    form = MaintenanceWindowForm
    list_display = ["node", "start", "end", "reason", "created_by"]
    list_filter = ["node"]
    fields = ["node", "start", "end", "reason"]

    def get_readonly_fields(self, request, obj=None):
        # A window's holds are cut when it is made; changing it means deleting it and making a new one.
        return ["node", "start", "end"] if obj else []

    def save_model(self, request, obj, form, change):
        if change:
            obj.save(update_fields=["reason"])
            return
        # The form checked for bookings in the way; a booking made since is refused by the constraint.
        window = maintenance_create(node=obj.node, start=obj.start, end=obj.end, reason=obj.reason, user=request.user)
        obj.pk = window.pk


@admin.register(TeamBookingPolicy)
class TeamBookingPolicyAdmin(admin.ModelAdmin):
    list_display = ["team", "max_hours", "max_days_ahead", "max_gpus_per_booking", "max_gpus_held",
                    "idle_warn_minutes", "idle_release_minutes"]

    # The policy is edited only here: each save and delete is audited in the admin's transaction.
    def save_model(self, request, obj, form, change):
        stored = TeamBookingPolicy.objects.select_related("team").filter(pk=obj.pk).first() if change else None
        super().save_model(request, obj, form, change)
        self._record(request, obj, before=audit_values(stored) if stored else None, after=audit_values(obj))

    def delete_model(self, request, obj):
        before, pk = audit_values(obj), obj.pk
        super().delete_model(request, obj)
        obj.pk = pk
        self._record(request, obj, before=before, after=None)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for policy in queryset.select_related("team"):
                self.delete_model(request, policy)

    def _record(self, request, policy, *, before, after):
        audit_record(kind=AuditKind.BOOKING_POLICY, user=request.user, object_id=policy.pk, team_id=policy.team_id,
                     subject=f"booking policy of {policy.team.slug}", before=before, after=after)
