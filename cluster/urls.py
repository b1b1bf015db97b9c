from django.urls import path

from cluster import job_views, views

app_name = "cluster"
urlpatterns = [
    path("inventory/", views.inventory, name="inventory"),
    path("inventory/nodes/<str:hostname>/", views.node_detail, name="node-detail"),
    path("jobs/", job_views.job_list, name="job-list"),
    path("jobs/<int:pk>/", job_views.job_detail, name="job-detail"),
]
