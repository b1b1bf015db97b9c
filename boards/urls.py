from django.urls import path

from boards import views
from boards.backtest import views as backtest_views
from boards.periods import views as periods_views

app_name = "boards"
urlpatterns = [
    path("", views.daily, name="daily"),
    path("board/live/", views.daily_live, name="daily-live"),
    path("board/idle/", views.idle_allocations, name="idle-allocations"),
    path("board/profile/", periods_views.profile, name="profile"),
    path("board/week/", periods_views.week, name="week"),
    path("board/month/", periods_views.month, name="month"),
    path("boards/backtest/", backtest_views.backtest, name="backtest"),
    path("boards/backtest.csv", backtest_views.backtest_csv, name="backtest-csv"),
]
