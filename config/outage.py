"""The database is away (issue 17): every request answers 503 with ``Retry-After``, never a traceback.

:class:`DatabaseOutage` sits outside the session and authentication middleware (their reads are the first
a request makes). Before passing a request on it makes sure the connection works (the health check Django
would run on the first query anyway, so a working database costs nothing more); a connection failure then,
or one raised by a view, becomes a 503: the API's error shape (``{"detail": …}``) on ``/api/`` paths, and on
pages a standalone translated page that renders with no database (no context processors, no user, no
session). A failure in a middleware inside this one is marked by the ``got_request_exception`` signal and
its 500 replaced the same way.

Only a failure to reach the database counts: an error without an SQLSTATE (no connection, a dropped one), the
connection-exception class 08, the server shutting down or starting (57P01–57P03) or out of connections
(53300). A deadlock or a cancelled statement stays the 500 it is.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.signals import got_request_exception
from django.db import InterfaceError, OperationalError, connection
from django.http import HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.utils import translation
from django.utils.translation import gettext as _

from config.errors import is_api

log = logging.getLogger(__name__)

UNREACHABLE_STATES = frozenset({"57P01", "57P02", "57P03", "53300"})
_MARK = "_cardhour_database_outage"


def is_connection_failure(error: BaseException) -> bool:
    """Whether ``error`` says the database cannot be reached (not that a statement failed)."""
    if isinstance(error, InterfaceError):
        return True
    if not isinstance(error, OperationalError):
        return False
    state = getattr(error.__cause__, "sqlstate", None)
    return state is None or state.startswith("08") or state in UNREACHABLE_STATES


def outage_response(request) -> HttpResponse:
    """The 503: JSON on the API, the standalone page elsewhere, in the reader's language, with Retry-After."""
    language = translation.get_language_from_request(request)
    with translation.override(language):
        if is_api(request):
            response = JsonResponse(
                {"detail": _("The database is unavailable for a moment. Try again shortly.")}, status=503)
        else:
            body = render_to_string("503.html", {"LANGUAGE_CODE": language})
            response = HttpResponse(body, status=503, content_type="text/html; charset=utf-8")
    response["Retry-After"] = str(settings.DATABASE_OUTAGE_RETRY_AFTER_S)
    response["Cache-Control"] = "no-store"
    return response


def _mark_failure(sender, request=None, **kwargs) -> None:
    import sys

    error = sys.exc_info()[1]
    if request is not None and error is not None and is_connection_failure(error):
        setattr(request, _MARK, error)


got_request_exception.connect(_mark_failure, dispatch_uid="config.outage.mark_failure")


class DatabaseOutage:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            # A connection kept from an earlier request may have died with the server: check it as the first
            # query would, then connect if there is none.
            connection.close_if_health_check_failed()
            connection.ensure_connection()
        except (OperationalError, InterfaceError) as error:
            if not is_connection_failure(error):
                raise
            return self._outage(request, error)
        response = self.get_response(request)
        error = getattr(request, _MARK, None)
        if error is not None and response.status_code == 500:
            return self._outage(request, error)
        return response

    def process_exception(self, request, exception):
        if is_connection_failure(exception):
            return self._outage(request, exception)
        return None

    @staticmethod
    def _outage(request, error: BaseException) -> HttpResponse:
        log.warning("database unavailable (%s %s): %s", request.method, request.path, str(error).strip()[:300])
        return outage_response(request)
