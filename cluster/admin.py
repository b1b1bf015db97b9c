from django import forms
from django.contrib import admin, messages
from django.db import models
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from cluster.jobs import job_allocations_follow, job_time_errors
from cluster.models import (
    Alert,
    Allocation,
    Gpu,
    GpuModel,
    GpuModelAlias,
    Job,
    Node,
    NodeStatusPeriod,
    TeamIdentity,
)
from cluster.services import agent_config_line, node_status_set, node_token_rotate
from core.timewindow import window_message


class GpuModelAliasForm(forms.ModelForm):
    """Lower-cases the alias before the model's constraints are checked (an alias matches any case)."""

    class Meta:
        model = GpuModelAlias
        fields = ["alias", "model"]

    def clean_alias(self):
        return self.cleaned_data["alias"].strip().lower()


class GpuModelAliasInline(admin.TabularInline):
    model = GpuModelAlias
    form = GpuModelAliasForm
    extra = 1
    fields = ["alias"]


@admin.register(GpuModel)
class GpuModelAdmin(admin.ModelAdmin):
    list_display = ["short_name", "name", "memory_mib"]
    search_fields = ["name", "short_name", "aliases__alias"]
    inlines = [GpuModelAliasInline]


@admin.register(GpuModelAlias)
class GpuModelAliasAdmin(admin.ModelAdmin):
    """Other names of a GPU model, as files write them (a Slurm GRES type such as ``a100_80``). Imports
    match a name, without regard to case, to a model's NVML name, then its short name, then these."""

    form = GpuModelAliasForm
    list_display = ["alias", "model", "model_name"]
    list_select_related = ["model"]
    list_filter = ["model"]
    search_fields = ["alias", "model__name", "model__short_name"]
    autocomplete_fields = ["model"]

    @admin.display(description=_("NVML name"), ordering="model__name")
    def model_name(self, obj):
        return obj.model.name


def _formfield(field, **kwargs):
    # Agent URLs on a cluster network are plain http (also what Django 6 will no longer assume).
    if isinstance(field, models.URLField):
        kwargs.setdefault("assume_scheme", "http")
    return field.formfield(**kwargs)


class NodeAdminForm(forms.ModelForm):
    # The token is write-only here as in the API: typing one replaces it, leaving it blank keeps it.
    agent_token = forms.CharField(
        label=_("Agent token"), required=False, widget=forms.PasswordInput(render_value=False),
        help_text=_("Leave blank to keep the current token. Stored encrypted."),
    )

    class Meta:
        model = Node
        fields = ["hostname", "pool", "labels", "agent_url", "agent_token", "status"]
        formfield_callback = _formfield

    def clean_agent_token(self):
        token = self.cleaned_data["agent_token"]
        return token or (self.instance.agent_token if self.instance.pk else "")


class GpuInline(admin.TabularInline):
    model = Gpu
    fk_name = "node"
    extra = 0
    fields = ["index", "uuid", "model", "memory_mib", "status", "mig_parent", "mig_profile", "share"]
    raw_id_fields = ["mig_parent"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    form = NodeAdminForm
    formfield_overrides = {models.URLField: {"assume_scheme": "http"}}  # as _formfield, for the admin's own form
    list_display = ["hostname", "pool", "status", "last_seen_at"]
    list_filter = ["pool", "status"]
    search_fields = ["hostname"]
    readonly_fields = ["last_seen_at", "created_at"]
    inlines = [GpuInline]
    actions = ["rotate_agent_token"]

    def save_model(self, request, obj, form, change):
        status = obj.status
        if change and "status" in form.changed_data:
            obj.status = form.initial["status"]  # node_status_set records the change in the history
        super().save_model(request, obj, form, change)
        node_status_set(node=obj, status=status, reason=f"set by {request.user.get_username()} in the admin")

    @admin.action(description=_("Rotate the agent token (shown once)"))
    def rotate_agent_token(self, request, queryset):
        for node in queryset:
            token = node_token_rotate(node=node)
            self.message_user(
                request, _("%(node)s: new token %(token)s — agent config: %(line)s")
                % {"node": node.hostname, "token": token, "line": agent_config_line(token)},
                level=messages.WARNING,
            )


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["__str__", "uuid", "model", "status", "share"]
    list_filter = ["model", "status", "node__pool"]
    search_fields = ["uuid", "node__hostname"]
    list_select_related = ["node", "model"]
    raw_id_fields = ["mig_parent"]


class AllocationInline(admin.TabularInline):
    model = Allocation
    extra = 0
    fields = ["gpu", "gpu_model", "share", "start", "end", "origin"]
    raw_id_fields = ["gpu"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Correct or delete a job (issue 12): its times must lie in the supported window (jobs at most a day
    ahead), and its scheduler allocations follow its times, count and model, so the usage does too."""

    class JobAdminForm(forms.ModelForm):  # the admin's form factory adds the model and its fields
        def clean(self):
            cleaned = super().clean()
            for name, error in job_time_errors(cleaned, now=timezone.now()).items():
                self.add_error(name, window_message(error))
            start, end = cleaned.get("start_time"), cleaned.get("end_time")
            if start and end and end < start and "end_time" not in self.errors:
                self.add_error("end_time", _("is before start_time."))
            return cleaned

    form = JobAdminForm
    list_display = ["external_id", "source", "name", "user", "team", "state", "gpu_count", "start_time", "end_time"]
    list_filter = ["source", "state", "team"]
    search_fields = ["external_id", "name", "user"]
    list_select_related = ["team"]
    raw_id_fields = ["project"]
    inlines = [AllocationInline]

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        job_allocations_follow(form.instance)  # after the inline, so the job's times win


@admin.register(TeamIdentity)
class TeamIdentityAdmin(admin.ModelAdmin):
    """Which team a unix user's or Slurm account's GPU usage belongs to."""

    list_display = ["kind", "name", "team", "project"]
    list_filter = ["kind", "team"]
    search_fields = ["name"]


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

# Bookings have their own admin module (cluster/booking_admin.py); importing it registers them.
from cluster import booking_admin  # noqa: E402, F401
