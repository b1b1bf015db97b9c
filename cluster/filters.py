"""Inventory filters, shared by the inventory page and the API (one definition of what a filter means)."""

from django import forms
from django.db.models import Prefetch
from django.utils.translation import gettext_lazy as _

from cluster.choices import NodeStatus
from cluster.models import Gpu, GpuModel, Node


class NodeFilterForm(forms.Form):
    pool = forms.SlugField(label=_("Pool"), required=False)
    model = forms.ModelChoiceField(
        label=_("GPU model"), queryset=GpuModel.objects.all(), to_field_name="short_name", required=False,
        empty_label=_("All models"),
    )
    status = forms.ChoiceField(label=_("Status"), choices=[("", _("All statuses")), *NodeStatus.choices], required=False)

    def with_pool_choices(self):
        """Offer the known pools as a select (for the HTML page; the API needs no query for it)."""
        pools = Node.objects.pools()
        self.fields["pool"].widget = forms.Select(choices=[("", _("All pools")), *((p, p) for p in pools)])
        return self

    def filter(self, queryset):
        """Apply the cleaned filters; call after ``is_valid()``."""
        data = self.cleaned_data
        if data.get("pool"):
            queryset = queryset.filter(pool=data["pool"])
        if data.get("model"):
            queryset = queryset.filter(gpus__model=data["model"]).distinct()
        if data.get("status"):
            queryset = queryset.filter(status=data["status"])
        return queryset


def nodes_with_gpus():
    """Nodes with their whole GPUs (and each GPU's model and MIG instances) in three queries."""
    gpus = Gpu.objects.filter(mig_parent__isnull=True).select_related("model").prefetch_related("mig_instances")
    # Explicit order: Meta.ordering is not applied to GROUP BY (annotated) queries.
    return Node.objects.with_gpu_counts().prefetch_related(Prefetch("gpus", queryset=gpus, to_attr="whole_gpus")).order_by("hostname")
