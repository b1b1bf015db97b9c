from django import forms
from django.contrib import admin
from django.db import models
from django.utils.translation import gettext_lazy as _

from cluster.models import Gpu, GpuModel, Node


@admin.register(GpuModel)
class GpuModelAdmin(admin.ModelAdmin):
    list_display = ["short_name", "name", "memory_mib"]
    search_fields = ["name", "short_name"]


def _formfield(field, **kwargs):
    # Agent URLs on a cluster network are plain http; also silences Django 6's https-default warning.
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
    list_display = ["hostname", "pool", "status", "last_seen_at"]
    list_filter = ["pool", "status"]
    search_fields = ["hostname"]
    readonly_fields = ["last_seen_at", "created_at"]
    inlines = [GpuInline]


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["__str__", "uuid", "model", "status", "share"]
    list_filter = ["model", "status", "node__pool"]
    search_fields = ["uuid", "node__hostname"]
    list_select_related = ["node", "model"]
    raw_id_fields = ["mig_parent"]
