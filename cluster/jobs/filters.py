"""Job filters, shared by the job list page and the API (one definition of what a filter means)."""

from django import forms
from django.core.validators import MaxValueValidator, MinValueValidator
from django.utils.translation import gettext_lazy as _

from cluster.inventory.filters import FIRST_DAY, LAST_DAY
from cluster.models import GpuModel, JobState
from teams.models import Project, Team

# The job list's sort orders: a column, ascending, or "-column", descending. The selector maps each to
# its ORDER BY; anything else is a form error naming the parameter.
JOB_SORT_COLUMNS = ("submit", "start", "end", "gpus", "state")
JOB_SORTS = tuple(value for column in JOB_SORT_COLUMNS for value in (column, f"-{column}"))
JOB_DEFAULT_SORT = "-submit"
SORT_RULE = _("The “sort” parameter must be one of: %(values)s.")
STARTED_AFTER_RULE = _(
    "The “started_after” parameter must be a date written YYYY-MM-DD, for example 2026-11-02."
)
STARTED_BEFORE_RULE = _(
    "The “started_before” parameter must be a date written YYYY-MM-DD, for example 2026-11-02."
)


def _start_date_field(label, rule):
    return forms.DateField(
        label=label, required=False, input_formats=["%Y-%m-%d"], error_messages={"invalid": rule},
        validators=[MinValueValidator(FIRST_DAY, rule), MaxValueValidator(LAST_DAY, rule)],
        widget=forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d"),
    )


class JobFilterForm(forms.Form):
    """The job list's query parameters, checked: teams and projects the person may see, a scheduler user,
    a state, a GPU model, start dates in the business time zone and a sort order from the whitelist.
    Invalid parameters are reported and left out; :meth:`filters` holds the valid ones."""

    team = forms.ModelChoiceField(
        label=_("Team"), queryset=None, to_field_name="slug", required=False, empty_label=_("All teams"),
    )
    project = forms.ModelChoiceField(label=_("Project"), queryset=None, required=False, empty_label=_("All projects"))
    user = forms.CharField(label=_("User"), max_length=100, required=False)
    state = forms.ChoiceField(label=_("State"), choices=[("", _("All states")), *JobState.choices], required=False)
    gpu_model = forms.ModelChoiceField(
        label=_("GPU model"), queryset=GpuModel.objects.all(), to_field_name="short_name", required=False,
        empty_label=_("All models"),
    )
    started_after = _start_date_field(_("Started on or after"), STARTED_AFTER_RULE)
    started_before = _start_date_field(_("Started on or before"), STARTED_BEFORE_RULE)
    sort = forms.ChoiceField(
        label=_("Sort"), choices=[(value, value) for value in JOB_SORTS], required=False,
        error_messages={"invalid_choice": SORT_RULE},
    )

    def __init__(self, data=None, *, user, **kwargs):
        super().__init__(data, **kwargs)
        self.fields["team"].queryset = Team.objects.visible_to(user).order_by("name")
        project = self.fields["project"]
        project.queryset = Project.objects.visible_to(user).select_related("team").order_by("team__name", "name")
        project.label_from_instance = lambda p: f"{p.team.name} · {p.name}"
        self.fields["sort"].error_messages["invalid_choice"] = SORT_RULE % {"values": ", ".join(JOB_SORTS)}

    def clean(self):
        data = super().clean()
        after, before = data.get("started_after"), data.get("started_before")
        if after and before and after > before:
            self.add_error("started_before", _("“started_before” must not be earlier than “started_after”."))
        return data

    def filters(self) -> dict:
        """The valid, non-empty parameters (validates the form first), with ``sort`` always set."""
        self.is_valid()
        cleaned = getattr(self, "cleaned_data", {})
        chosen = {name: value for name, value in cleaned.items() if value not in (None, "")}
        chosen.setdefault("sort", JOB_DEFAULT_SORT)
        return chosen
