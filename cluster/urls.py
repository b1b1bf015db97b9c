from django.urls import path

from cluster.bookings import views as booking_views
from cluster.inventory import views
from cluster.jobs import views as job_views

app_name = "cluster"
urlpatterns = [
    path("inventory/", views.inventory, name="inventory"),
    path("inventory/nodes/<str:hostname>/", views.node_detail, name="node-detail"),
    path("jobs/", job_views.job_list, name="job-list"),
    path("jobs/<int:pk>/", job_views.job_detail, name="job-detail"),
    path("bookings/", booking_views.booking_calendar, name="booking-calendar"),
    path("bookings/new/", booking_views.booking_new, name="booking-new"),
    path("bookings/mine/", booking_views.booking_mine, name="booking-mine"),
    path("bookings/<int:pk>/cancel/", booking_views.booking_cancel_view, name="booking-cancel"),
    path("bookings/<int:pk>/extend/", booking_views.booking_extend_view, name="booking-extend"),
]
