from django.urls import path

from boards import views

app_name = "boards"
urlpatterns = [
    path("", views.daily, name="daily"),
    path("board/live/", views.daily_live, name="daily-live"),
    path("board/idle/", views.idle_allocations, name="idle-allocations"),
]
