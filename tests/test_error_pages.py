"""A forbidden page is a styled 403 in the site's layout; a missing one a styled 404."""

import pytest
from django.core.exceptions import PermissionDenied
from django.test import RequestFactory
from django.views.defaults import permission_denied


@pytest.mark.django_db
def test_a_forbidden_page_is_a_styled_403(engineer_a):
    request = RequestFactory().get("/somewhere/")
    request.user = engineer_a
    response = permission_denied(request, PermissionDenied())
    body = response.content.decode()
    assert response.status_code == 403
    assert "Your role does not allow this page" in body
    assert 'data-nav="inventory"' in body


@pytest.mark.django_db
def test_a_missing_page_is_a_styled_404(client, engineer_a):
    client.force_login(engineer_a)
    response = client.get("/no/such/page/")
    assert response.status_code == 404
    assert "There is nothing here" in response.content.decode()
