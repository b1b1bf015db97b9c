from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from teams import views as teams_views

urlpatterns = [
    path("accounts/login/", teams_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", teams_views.LogoutView.as_view(), name="logout"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("admin/", admin.site.urls),
    path("", include("boards.urls")),
    path("", include("teams.urls")),
    path("", include("cluster.urls")),
    path("", include("accounting.urls")),
    path("api/v1/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/v1/", include("config.api_urls")),
]

handler400 = "config.errors.bad_request"
handler403 = "config.errors.permission_denied"
handler404 = "config.errors.page_not_found"
handler500 = "config.errors.server_error"
