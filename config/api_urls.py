from django.urls import path
from rest_framework.routers import DefaultRouter

from accounting.api import views as accounting_api
from accounting.api.usage_views import UsageReportView
from cluster.api import booking_views, job_views
from cluster.api import views as cluster_api

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

urlpatterns = [
    *router.urls,
    path("availability/", booking_views.AvailabilityView.as_view(), name="availability"),
    path("reports/usage/", UsageReportView.as_view(), name="usage-report"),
]
