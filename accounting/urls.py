from django.urls import path

from accounting import finance_views, notification_views, views

app_name = "accounting"
urlpatterns = [
    path("teams/", views.team_list, name="team-list"),
    path("teams/<slug:slug>/", views.team_detail, name="team-detail"),
    path("account/tokens/", views.token_list, name="token-list"),
    path("account/tokens/<int:pk>/revoke/", views.token_revoke, name="token-revoke"),
    path("finance/", finance_views.finance, name="finance"),
    path("finance/close/", finance_views.finance_close, name="finance-close"),
    path("finance/reopen/", finance_views.finance_reopen, name="finance-reopen"),
    path("finance/download/statement/", finance_views.finance_statement_download, name="finance-download-statement"),
    path("finance/download/usage/", finance_views.finance_usage_download, name="finance-download-usage"),
    path("notifications/", notification_views.notification_list, name="notifications"),
]
