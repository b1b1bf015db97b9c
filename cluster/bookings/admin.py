"""Admin for bookings: bookings and their holds are read-only here (writes go through the services so
the rules and the exclusion constraint answer clearly); maintenance windows are created through
``maintenance_create``; team booking policies and guaranteed shares are plain rows, each change audited."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils.translation import gettext_lazy as _

from cluster.bookings.holds import bookable_gpus, first_conflict, hold_conflict_message, node_gpu_ids
from cluster.bookings.services import maintenance_create
from cluster.models import Booking, GpuHold, MaintenanceWindow, TeamBookingPolicy, TeamGuarantee
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


class AuditedTeamRows(admin.ModelAdmin):
    """A team's settings row edited only here: each save and delete audited (``audit_kind``) in the admin's
    transaction."""

    audit_kind = ""

    def save_model(self, request, obj, form, change):
        stored = type(obj).objects.select_related("team").filter(pk=obj.pk).first() if change else None
        super().save_model(request, obj, form, change)
        self._record(request, obj, before=audit_values(stored) if stored else None, after=audit_values(obj))

    def delete_model(self, request, obj):
        before, pk = audit_values(obj), obj.pk
        super().delete_model(request, obj)
        obj.pk = pk
        self._record(request, obj, before=before, after=None)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for row in queryset.select_related("team"):
                self.delete_model(request, row)

    def _record(self, request, row, *, before, after):
        audit_record(kind=self.audit_kind, user=request.user, object_id=row.pk, team_id=row.team_id,
                     subject=self.subject(row), before=before, after=after)


@admin.register(TeamBookingPolicy)
class TeamBookingPolicyAdmin(AuditedTeamRows):
    list_display = ["team", "max_hours", "max_days_ahead", "max_gpus_per_booking", "max_gpus_held",
                    "idle_warn_minutes", "idle_release_minutes"]
    audit_kind = AuditKind.BOOKING_POLICY

    def subject(self, policy) -> str:
        return f"booking policy of {policy.team.slug}"


@admin.register(TeamGuarantee)
class TeamGuaranteeAdmin(AuditedTeamRows):
    """Guaranteed shares (issue 19). Saving one whose model's guarantees add up to more GPUs than the model
    has warns: the rule still holds, but the first teams to book get their share and the last may not."""

    list_display = ["team", "gpu_model", "gpus", "days", "start_time", "end_time"]
    list_filter = ["gpu_model", "team"]
    audit_kind = AuditKind.GUARANTEE

    def subject(self, guarantee) -> str:
        return f"guaranteed share of {guarantee.team.slug} ({guarantee.gpu_model.short_name})"

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        total = sum(TeamGuarantee.objects.filter(gpu_model=obj.gpu_model).values_list("gpus", flat=True))
        gpus = bookable_gpus().filter(model=obj.gpu_model).count()
        if total > gpus:
            messages.warning(request, _("The guaranteed shares of %(model)s add up to %(total)d GPUs, more than the "
                                        "%(gpus)d that can be booked: not every team can reach its share at once.")
                             % {"model": obj.gpu_model.short_name, "total": total, "gpus": gpus})
