from django.urls import path

from accounting.money import views as finance_views
from accounting.notify import views as notification_views
from accounting.plans import views as plan_views
from accounting.team_pages import views as team_views

app_name = "accounting"
urlpatterns = [
    path("teams/", team_views.team_list, name="team-list"),
    path("teams/<slug:slug>/", team_views.team_detail, name="team-detail"),
    path("teams/<slug:slug>/plan/", plan_views.team_plan_page, name="team-plan"),
    path("finance/", finance_views.finance, name="finance"),
    path("finance/close/", finance_views.finance_close, name="finance-close"),
    path("finance/reopen/", finance_views.finance_reopen, name="finance-reopen"),
    path("finance/download/statement/", finance_views.finance_statement_download, name="finance-download-statement"),
    path("finance/download/usage/", finance_views.finance_usage_download, name="finance-download-usage"),
    path("notifications/", notification_views.notification_list, name="notifications"),
]
