from django.urls import path
from rest_framework.routers import DefaultRouter

from accounting.money import api as money_views
from accounting.money import statement_api as statement_views
from accounting.plans.api import TeamPlanView
from accounting.usage.api import UsageReportView
from boards.api import DailyBoardView
from cluster.bookings import api as booking_views
from cluster.inventory import api as cluster_api
from cluster.jobs import api as job_views
from teams import api as accounting_api

router = DefaultRouter()
router.register("gpu-models", cluster_api.GpuModelViewSet, basename="gpumodel")
router.register("nodes", cluster_api.NodeViewSet, basename="node")
router.register("gpus", cluster_api.GpuViewSet, basename="gpu")
router.register("jobs", job_views.JobViewSet, basename="job")
router.register("bookings", booking_views.BookingViewSet, basename="booking")
router.register("teams", accounting_api.TeamViewSet, basename="team")
router.register("projects", accounting_api.ProjectViewSet, basename="project")
router.register("memberships", accounting_api.MembershipViewSet, basename="membership")
router.register("tokens", accounting_api.ApiTokenViewSet, basename="apitoken")
router.register("rate-cards", money_views.RateCardViewSet, basename="ratecard")
router.register("energy-tariffs", money_views.EnergyTariffViewSet, basename="energytariff")
router.register("quotas", money_views.QuotaViewSet, basename="quota")
router.register("money-changes", money_views.MoneyChangeViewSet, basename="moneychange")

urlpatterns = [
    path("teams/<slug:slug>/plan/", TeamPlanView.as_view(), name="team-plan"),
    *router.urls,
    path("availability/", booking_views.AvailabilityView.as_view(), name="availability"),
    path("guarantees/", booking_views.GuaranteeListView.as_view(), name="guarantee-list"),
    path("reports/usage/", UsageReportView.as_view(), name="usage-report"),
    path("boards/daily/", DailyBoardView.as_view(), name="board-daily"),
    path("charge-policy/", money_views.ChargePolicyView.as_view(), name="charge-policy"),
    path("statements/", statement_views.StatementListView.as_view(), name="statement-list"),
    path("statements/<int:pk>/", statement_views.StatementDetailView.as_view(), name="statement-detail"),
    path("statements/priced-usage/", statement_views.PricedUsageView.as_view(), name="statement-priced-usage"),
    path("statements/close/", statement_views.CloseView.as_view(), name="statement-close"),
    path("statements/reopen/", statement_views.ReopenView.as_view(), name="statement-reopen"),
]
