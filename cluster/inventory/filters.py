"""Inventory filters, shared by the pages and the API (one definition of what a filter means)."""

from datetime import date

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
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


FIRST_DAY, LAST_DAY = date(1970, 1, 2), date(9999, 12, 30)  # a day's window must fit in a datetime
DAY_RULE = _("The “day” parameter must be a date written YYYY-MM-DD, for example 2026-11-02.")


class NodeDayForm(forms.Form):
    """``?day=YYYY-MM-DD``: the business-zone day the node page charts (empty: today)."""

    day = forms.DateField(
        label=_("Day"), required=False, input_formats=["%Y-%m-%d"],
        error_messages={"invalid": DAY_RULE},
        validators=[MinValueValidator(FIRST_DAY, DAY_RULE), MaxValueValidator(LAST_DAY, DAY_RULE)],
        widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"),
    )

    def chosen_day(self, *, today: date) -> date:
        """The valid day asked for, else today (the form then carries the error to show)."""
        if self.is_bound and self.is_valid() and self.cleaned_data["day"]:
            return self.cleaned_data["day"]
        return today
