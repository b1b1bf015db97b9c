"""The plan's JSON (issue 19): what :func:`accounting.plans.selectors.team_plan` holds, as the page shows it.
Card-hours are decimal strings with 2 places (as the page rounds them), the ratio a percentage with one
place (``null``: no estimate), times RFC 3339 in the display zone, as everywhere in the API."""

from __future__ import annotations

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers

from accounting.money.statements import period_label
from accounting.plans import rules
from core.api import AwareDateTimeField

DEVIATION_HELP = _("over, under (finished jobs and past weeks only), on_plan, or no_estimate; beyond "
                   "deviation_pct percent of the estimate is over or under.")


def _decimal(value):
    return None if value is None else format(value, "f")


class PlanJobSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="job.pk")
    external_id = serializers.CharField(source="job.external_id")
    name = serializers.CharField(source="job.name")
    user = serializers.CharField(source="job.user")
    project = serializers.CharField(source="job.project.slug", default=None, allow_null=True)
    state = serializers.CharField(source="job.state")
    priority = serializers.IntegerField(source="job.priority", allow_null=True)
    gpu_count = serializers.SerializerMethodField()
    submit_time = AwareDateTimeField(source="job.submit_time", allow_null=True)
    start_time = AwareDateTimeField(source="job.start_time", allow_null=True)
    end_time = AwareDateTimeField(source="job.end_time", allow_null=True)
    data_ready = serializers.BooleanField(source="job.data_ready", allow_null=True)
    data_ready_at = AwareDateTimeField(source="job.data_ready_at", allow_null=True)
    estimated_card_hours = serializers.SerializerMethodField(help_text=_("null: no estimate."))
    card_hours_used = serializers.SerializerMethodField(help_text=_(
        "Card-hours its allocations held: so far for a queued or running job (0 before it starts)."))
    ratio_pct = serializers.SerializerMethodField(help_text=_("Used ÷ estimate in percent; null: no estimate."))
    deviation = serializers.ChoiceField(choices=rules.DEVIATIONS, help_text=DEVIATION_HELP)

    def get_gpu_count(self, row) -> str:
        return _decimal(row.job.gpu_count)

    def get_estimated_card_hours(self, row) -> str | None:
        return _decimal(row.estimate)

    def get_card_hours_used(self, row) -> str:
        return _decimal(row.used_card_hours)

    def get_ratio_pct(self, row) -> str | None:
        return _decimal(row.ratio_pct)


class PlanWeekSerializer(serializers.Serializer):
    first_day = serializers.DateField(source="first")
    last_day = serializers.DateField(source="last")
    planned_card_hours = serializers.SerializerMethodField()
    actual_card_hours = serializers.SerializerMethodField(help_text=_("null: the week has not begun."))
    ratio_pct = serializers.SerializerMethodField(help_text=_("Actual ÷ planned in percent; null: nothing planned."))
    deviation = serializers.ChoiceField(choices=rules.DEVIATIONS, help_text=DEVIATION_HELP)
    partial = serializers.BooleanField(help_text=_("The week holds today: its actual still grows."))

    def get_planned_card_hours(self, week) -> str:
        return _decimal(week.planned_card_hours)

    def get_actual_card_hours(self, week) -> str | None:
        return _decimal(week.actual_card_hours)

    def get_ratio_pct(self, week) -> str | None:
        return _decimal(week.ratio_pct)


class WaitSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="job.pk")
    external_id = serializers.CharField(source="job.external_id")
    name = serializers.CharField(source="job.name")
    user = serializers.CharField(source="job.user")
    gpu_count = serializers.SerializerMethodField()
    waited_from = AwareDateTimeField()
    waited_to = AwareDateTimeField(help_text=_("Data ready, or the job's end, or now."))
    still_waiting = serializers.BooleanField()
    card_hours_held = serializers.SerializerMethodField()

    def get_gpu_count(self, row) -> str:
        return _decimal(row.job.gpu_count)

    def get_card_hours_held(self, row) -> str:
        return _decimal(row.held_card_hours)


class TeamPlanSerializer(serializers.Serializer):
    """A team's plan against actual for a month."""

    team = serializers.CharField(source="team.slug")
    period = serializers.SerializerMethodField(help_text=_("The month, e.g. 2026-11."))
    deviation_pct = serializers.IntegerField(help_text=_("CARDHOUR_PLAN_DEVIATION_PCT."))
    open_jobs = PlanJobSerializer(many=True, help_text=_("Queued and running jobs now, highest priority first."))
    finished_jobs = PlanJobSerializer(many=True, help_text=_("Jobs that ended in the month, latest first."))
    weeks = PlanWeekSerializer(many=True)
    waited_for_data = WaitSerializer(many=True, source="waited", help_text=_(
        "Jobs that held GPUs before their data was ready, most card-hours first."))
    queued_estimate_card_hours = serializers.SerializerMethodField()
    planned_card_hours = serializers.SerializerMethodField()
    actual_card_hours = serializers.SerializerMethodField()
    waited_card_hours = serializers.SerializerMethodField()
    data_complete_to = AwareDateTimeField(allow_null=True)
    pending_buckets = serializers.IntegerField(help_text=_(
        "Usage not yet counted over the month: actual card-hours after pending_from may still grow."))
    pending_from = AwareDateTimeField(allow_null=True)

    def get_period(self, plan) -> str:
        return period_label(plan.first)

    def get_queued_estimate_card_hours(self, plan) -> str:
        return _decimal(plan.queued_estimate_card_hours)

    def get_planned_card_hours(self, plan) -> str:
        return _decimal(plan.planned_total)

    def get_actual_card_hours(self, plan) -> str:
        return _decimal(plan.actual_total)

    def get_waited_card_hours(self, plan) -> str:
        return _decimal(plan.waited_total)
