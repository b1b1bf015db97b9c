"""The daily board in the API: ``GET /api/v1/boards/daily/?date=&pool=&gpu_model=&node=&team=`` returns the
figures the page shows, from the same selectors (``boards/daily.py``), scoped to the caller's role."""

from __future__ import annotations

from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import permissions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from boards.daily import board_json, daily_board
from boards.filters import BoardFilterForm
from core.api import ApiErrorSerializer, FastJSONRenderer, form_errors


class DailyBoardSerializer(serializers.Serializer):
    """The daily board's figures. Card-hours and money are decimal strings (4 and the currency's places),
    percentages decimal strings with one place, times RFC 3339 in UTC."""

    date = serializers.DateField(help_text=_("The business day shown."))
    live = serializers.BooleanField(help_text=_("True for today: the figures still grow."))
    computed_to = serializers.DateTimeField(help_text=_("The day's usage is computed up to this instant."))
    currency = serializers.CharField()
    tiles = serializers.DictField(child=serializers.DictField(allow_null=True), help_text=_(
        "capacity_gpus (with card_hours), allocation_rate, efficiency, idle_card_hours, idle_cost (absent for "
        "engineers; a lead's teams only), unmeasured_card_hours, unallocated_card_hours, down_card_hours: each "
        "{value, mean_previous_7_days, change}."))
    unplaced_card_hours = serializers.CharField(help_text=_(
        "Card-hours of jobs whose GPUs are not known: in the teams and the ranking, in no GPU figure."))
    teams = serializers.ListField(child=serializers.DictField(allow_null=True), help_text=_(
        "Per team: card_hours_allocated, _busy, _idle, _unmeasured, efficiency_pct, idle_cost, usage_cost "
        "(null where the caller does not see the team's costs), quota_used_pct, quota_run_out; by idle cost."))
    timeline = serializers.ListField(child=serializers.DictField(allow_null=True), help_text=_(
        "Per hour: busy, idle, unmeasured, other_teams (under a team filter), unallocated, down and capacity "
        "card-hours (they add up to capacity); partial: still filling."))
    heatmap = serializers.DictField(help_text=_(
        "Matrices with a row per GPU (level gpu: gpus) and a column per hour (hours): kind (measured, unmeasured, "
        "other_teams, unallocated, down), util_pct (measured cells only), teams, holders (the jobs and "
        "bookings the caller may see). Past CARDHOUR_BOARD_GPU_ROWS GPUs a row per node (level node: nodes), past "
        "CARDHOUR_BOARD_NODE_ROWS nodes a row per pool (level pool: pools), with gpus (GPUs per row), kind, "
        "util_pct, share_pct (each series' share of the row's card-hours) and teams, no holders: ask with node= "
        "for a node's GPUs."))
    idle_allocations = serializers.ListField(child=serializers.DictField(allow_null=True), help_text=_(
        "Every allocation of the day, most idle first: kind (job, booking, or team: another team's "
        "allocations as one total), id, label, team, project, user, gpus, card_hours_idle, "
        "card_hours_allocated, idle_share_pct, idle_cost, unplaced; card_hours_idle_memory_held (the idle card-hours "
        "whose GPU held memory), card_hours_shallow_busy (busy under the SM-activity threshold; null: no SM data) "
        "and shallow_busy_cost."))
    long_idle = serializers.ListField(child=serializers.DictField(allow_null=True))
    always_full = serializers.ListField(child=serializers.DictField(allow_null=True))
    utilization_bands = serializers.ListField(child=serializers.DictField(allow_null=True))
    nodes = serializers.ListField(child=serializers.DictField(allow_null=True), help_text=_("Node health, now."))


class DailyBoardView(APIView):
    """The daily board (issue 14) as JSON, for every signed-in role."""

    permission_classes = [permissions.IsAuthenticated]
    renderer_classes = [FastJSONRenderer]

    @extend_schema(
        parameters=[
            OpenApiParameter("date", OpenApiTypes.DATE, description=_("Business day, YYYY-MM-DD; default yesterday.")),
            OpenApiParameter("pool", OpenApiTypes.STR, description=_("A node pool.")),
            OpenApiParameter("gpu_model", OpenApiTypes.STR, description=_("A GPU model's short name.")),
            OpenApiParameter("node", OpenApiTypes.STR, description=_("A node's hostname.")),
            OpenApiParameter("team", OpenApiTypes.STR, description=_("A team's slug.")),
        ],
        responses={
            200: DailyBoardSerializer,
            400: OpenApiResponse(ApiErrorSerializer, description=_(
                "A parameter breaks a rule (date format or outside 2000-01-01 … today, unknown pool, model, node "
                "or team); `detail` names it.")),
        },
        description=_("The figures of the daily board page for one business day, scoped to the caller's role."),
    )
    def get(self, request):
        form = BoardFilterForm(request.query_params, now=timezone.now())
        if not form.is_valid():
            raise serializers.ValidationError(form_errors(form))
        return Response(board_json(daily_board(form.scope(), user=request.user)))
