from django.urls import path

from boards import views
from boards.periods import views as periods_views

app_name = "boards"
urlpatterns = [
    path("", views.daily, name="daily"),
    path("board/live/", views.daily_live, name="daily-live"),
    path("board/idle/", views.idle_allocations, name="idle-allocations"),
    path("board/profile/", periods_views.profile, name="profile"),
    path("board/week/", periods_views.week, name="week"),
    path("board/month/", periods_views.month, name="month"),
]
