from django import forms
from django.contrib import admin, messages
from django.db import models
from django.utils.translation import gettext_lazy as _

from cluster.inventory.services import agent_config_line, node_token_record, node_token_rotate
from cluster.models import (
    Gpu,
    GpuModel,
    GpuModelAlias,
    Node,
)
from cluster.status.services import node_status_set


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
        token_before = Node.objects.filter(pk=obj.pk).values_list("agent_token", flat=True).first() if change else ""
        super().save_model(request, obj, form, change)
        node_token_record(user=request.user, node=obj, before=token_before or "")  # audited, never its value
        node_status_set(node=obj, status=status, reason=f"set by {request.user.get_username()} in the admin")

    @admin.action(description=_("Rotate the agent token (shown once)"))
    def rotate_agent_token(self, request, queryset):
        for node in queryset:
            token = node_token_rotate(node=node, user=request.user)
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


# Bookings have their own admin module (cluster/bookings/admin.py); importing it registers them.
