from django.urls import path

from accounting import views

app_name = "accounting"
urlpatterns = [
    path("teams/", views.team_list, name="team-list"),
    path("teams/<slug:slug>/", views.team_detail, name="team-detail"),
    path("account/tokens/", views.token_list, name="token-list"),
    path("account/tokens/<int:pk>/revoke/", views.token_revoke, name="token-revoke"),
]
