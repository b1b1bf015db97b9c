"""What every request meets before a view, and the error answers outside the views (issue 17).

- :class:`RequestRules` refuses a NUL character in the address or the query (no name can hold one, and
  PostgreSQL refuses it in a lookup): 400 on the API, 404 on a page. On the API it answers 413 for a body
  over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` before anything reads it.
- ``handler400`` … ``handler500`` answer API paths in the API's error shape (``{"detail": …}``, JSON) and
  pages with Django's pages; a 500 never shows a traceback (``DEBUG`` is off in production).
"""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, JsonResponse
from django.utils.translation import gettext as _
from django.views import defaults

API_PREFIX = "/api/"


def is_api(request) -> bool:
    return request.path.startswith(API_PREFIX)


class RequestRules:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path or "%00" in request.META.get("QUERY_STRING", ""):
            if is_api(request):
                return _api_error(400, _("The address cannot hold a NUL character (%00)."))
            raise Http404
        if is_api(request) and _content_length(request) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
            return _api_error(413, _("The body is larger than %(limit)s bytes.") % {
                "limit": settings.DATA_UPLOAD_MAX_MEMORY_SIZE})
        return self.get_response(request)


def _content_length(request) -> int:
    try:
        return int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return 0


def _api_error(status: int, detail: str) -> JsonResponse:
    return JsonResponse({"detail": detail}, status=status)


def bad_request(request, exception, template_name="400.html"):
    if is_api(request):
        return _api_error(400, _("Bad request."))
    return defaults.bad_request(request, exception)


def permission_denied(request, exception, template_name="403.html"):
    if is_api(request):
        return _api_error(403, _("You do not have permission to perform this action."))
    return defaults.permission_denied(request, exception)


def page_not_found(request, exception, template_name="404.html"):
    if is_api(request):
        return _api_error(404, _("Not found."))
    return defaults.page_not_found(request, exception)


def server_error(request, template_name="500.html"):
    if is_api(request):
        return _api_error(500, _("A server error occurred. It has been logged."))
    return defaults.server_error(request)
