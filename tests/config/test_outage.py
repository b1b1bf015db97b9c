"""The database away (issue 17): pages and the API answer 503 with Retry-After and no traceback.

The connection is pointed at a closed port on loopback (a port bound and let go), so every failure here is
the one psycopg raises when PostgreSQL does not answer.
"""

import json
import socket
from contextlib import contextmanager

import pytest
from django.core.handlers.exception import convert_exception_to_response
from django.db import OperationalError, connection
from django.http import HttpResponse
from django.test import Client, RequestFactory
from django.urls import reverse

from config.outage import DatabaseOutage, is_connection_failure
from tests.conftest import PASSWORD


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def database_away():
    """The default connection aimed at a port nobody listens on, then restored."""
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(HOST="127.0.0.1", PORT=str(closed_port()))
    connection.settings_dict["OPTIONS"] = {**saved.get("OPTIONS", {}), "connect_timeout": 2}
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)


def refused_connection_error() -> OperationalError:
    """The real error of connecting to a closed port, from a copy of the connection."""
    away = connection.copy()
    away.settings_dict = {**connection.settings_dict, "HOST": "127.0.0.1", "PORT": str(closed_port()),
                          "OPTIONS": {**connection.settings_dict.get("OPTIONS", {}), "connect_timeout": 2}}
    try:
        away.ensure_connection()
    except OperationalError as error:
        return error
    finally:
        away.close()
    raise AssertionError("a closed port accepted a connection")


def assert_outage_page(response, *, language="en"):
    body = response.content.decode()
    assert response.status_code == 503
    assert response["Retry-After"] == "30"
    assert response["Content-Type"].startswith("text/html")
    message = {"en": "Cardhour cannot reach its database right now.", "zh-hans": "Cardhour 目前无法连接数据库。"}
    assert message[language] in body  # in the reader's language
    assert f'<html lang="{language}">' in body
    assert "css/cardhour.css" in body  # styled with the site's stylesheet
    assert "Traceback" not in body and "OperationalError" not in body


@pytest.mark.django_db(transaction=True)
def test_it_answers_a_page_with_the_outage_page(engineer_a):
    client = Client(raise_request_exception=False)
    client.force_login(engineer_a)  # a session cookie: the session and the user are read before the view
    with database_away():
        response = client.get(reverse("cluster:inventory"))
    assert_outage_page(response)


@pytest.mark.django_db(transaction=True)
def test_it_answers_the_sign_in_page_in_the_readers_language(db):
    client = Client(raise_request_exception=False)
    with database_away():
        response = client.get(reverse("login"), HTTP_ACCEPT_LANGUAGE="zh-Hans,zh;q=0.9")
    assert_outage_page(response, language="zh-hans")


@pytest.mark.django_db(transaction=True)
def test_it_answers_the_api_in_its_error_shape(api, engineer_a):
    api.as_user(engineer_a)
    api.raise_request_exception = False
    with database_away():
        response = api.get("/api/v1/nodes/")
        posted = api.post("/api/v1/nodes/", {"hostname": "n1"}, format="json")
    for answer in (response, posted):
        assert answer.status_code == 503
        assert answer["Retry-After"] == "30"
        assert answer["Content-Type"] == "application/json"
        assert answer.json() == {"detail": "The database is unavailable for a moment. Try again shortly."}


@pytest.mark.django_db(transaction=True)
def test_pages_answer_again_once_the_database_is_back(client, engineer_a):
    client.force_login(engineer_a)
    with database_away():
        assert Client(raise_request_exception=False).get(reverse("login")).status_code == 503
    assert client.get(reverse("cluster:inventory")).status_code == 200
    assert client.post(reverse("login"), {"username": engineer_a.username, "password": PASSWORD}).status_code == 302


@pytest.mark.django_db
def test_a_view_that_loses_the_database_answers_503():
    error = refused_connection_error()
    assert is_connection_failure(error)
    request = RequestFactory().get("/api/v1/nodes/")
    response = DatabaseOutage(lambda request: HttpResponse()).process_exception(request, error)
    assert response.status_code == 503
    assert json.loads(response.content) == {"detail": "The database is unavailable for a moment. Try again shortly."}


@pytest.mark.django_db
def test_a_middleware_inside_that_loses_the_database_answers_503():
    """A failure raised inside (the session or auth middleware) reaches us as Django's 500: it is replaced."""
    error = refused_connection_error()

    def inner(request):
        raise error

    handler = DatabaseOutage(convert_exception_to_response(inner))
    response = handler(RequestFactory().get("/inventory/"))
    assert_outage_page(response)


@pytest.mark.django_db
def test_a_failing_statement_is_not_an_outage():
    """A cancelled statement (SQLSTATE 57014) is an OperationalError too, but the database is there: a 500."""
    with pytest.raises(OperationalError) as caught, connection.cursor() as cursor:
        cursor.execute("SET LOCAL statement_timeout = 1")
        cursor.execute("SELECT pg_sleep(1)")
    assert not is_connection_failure(caught.value)
    request = RequestFactory().get("/inventory/")
    assert DatabaseOutage(lambda request: HttpResponse()).process_exception(request, caught.value) is None
