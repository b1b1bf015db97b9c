from django.urls import path

from cluster import views

app_name = "cluster"
urlpatterns = [
    path("inventory/", views.inventory, name="inventory"),
    path("inventory/nodes/<str:hostname>/", views.node_detail, name="node-detail"),
]
