"""A team's plan against actual in the API (issue 19): ``GET /api/v1/teams/{slug}/plan/?period=YYYY-MM``, the
figures the plan page shows, from the same read (:func:`accounting.plans.selectors.team_plan`).

Who sees it is who sees the team (``Team.objects.visible_to``): admin and finance every team, leads and
engineers their own; another team's plan is a 404, as a team that does not exist."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import permissions, serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounting.plans.forms import PlanPeriodForm
from accounting.plans.selectors import team_plan
from accounting.plans.serializers import TeamPlanSerializer
from core.api import ApiErrorSerializer, FastJSONRenderer, form_errors
from teams.models import Team


class TeamPlanView(APIView):
    """A team's plan against actual for one month, for whoever sees the team."""

    permission_classes = [permissions.IsAuthenticated]
    renderer_classes = [FastJSONRenderer]

    @extend_schema(
        parameters=[
            OpenApiParameter("slug", OpenApiTypes.STR, OpenApiParameter.PATH, description=_("The team's slug.")),
            OpenApiParameter("period", OpenApiTypes.STR, description=_(
                "A month written YYYY-MM, e.g. 2026-11; default this month (business calendar).")),
        ],
        responses={
            200: TeamPlanSerializer,
            400: OpenApiResponse(ApiErrorSerializer, description=_(
                "period is not a month from 2000-01 to 2099-12 written YYYY-MM; `detail` says so.")),
            404: OpenApiResponse(ApiErrorSerializer, description=_(
                "No such team, or another team's (the same answer).")),
        },
        description=_("Queued and running jobs by priority with their estimate, card-hours used so far and the "
                      "ratio; the month's finished jobs with actual ÷ estimate; planned against actual card-hours "
                      "per week; jobs that waited for data. Deviations beyond CARDHOUR_PLAN_DEVIATION_PCT are "
                      "flagged over or under."),
    )
    def get(self, request, slug: str):
        team = get_object_or_404(Team.objects.visible_to(request.user), slug=slug)
        now = timezone.now()
        form = PlanPeriodForm(request.query_params, now=now)
        if not form.is_valid():
            raise serializers.ValidationError(form_errors(form))
        plan = team_plan(team, period=form.period_or_default(), now=now)
        return Response(TeamPlanSerializer(plan).data)
