"""Sign-in throttling (issue 17, django-axes): 10 failures in a row lock the account from anywhere and
the address for any account, answered with a 429 page; the lock ends after the cool-off; a success
resets the count; every failure is recorded."""

from datetime import timedelta

import pytest
import time_machine
from axes.models import AccessAttempt
from django.db.models import Sum

from tests.conftest import PASSWORD, T0

pytestmark = pytest.mark.django_db
LOGIN = "/accounts/login/"


@pytest.fixture(autouse=True)
def frozen_clock():
    """The throttle's windows are the application's clock: fixed, so the tests pass on any date."""
    with time_machine.travel(T0, tick=False) as traveller:
        yield traveller


def sign_in(client, username, password, address="10.0.0.1"):
    return client.post(LOGIN, {"username": username, "password": password}, REMOTE_ADDR=address)


def test_ten_failures_lock_the_account_even_with_the_right_password_until_the_cool_off(client, engineer_a,
                                                                                        frozen_clock):
    for _attempt in range(9):
        assert sign_in(client, engineer_a.username, "wrong").status_code == 200  # the form again, with its error
    locked = sign_in(client, engineer_a.username, "wrong")
    assert locked.status_code == 429 and 'data-testid="locked-out"' in locked.content.decode()
    assert "Try again in 15 minutes" in locked.content.decode()
    assert sign_in(client, engineer_a.username, PASSWORD).status_code == 429
    assert sign_in(client, engineer_a.username, PASSWORD, address="10.9.9.9").status_code == 429  # from anywhere
    failures = AccessAttempt.objects.filter(username=engineer_a.username).aggregate(n=Sum("failures_since_start"))
    assert failures["n"] >= 10  # recorded, with the address and the time
    frozen_clock.move_to(T0 + timedelta(minutes=16))
    response = sign_in(client, engineer_a.username, PASSWORD)
    assert response.status_code == 302 and response["Location"] == "/"


def test_ten_failures_from_one_address_lock_it_for_every_account(client, engineer_a, lead_a):
    for attempt in range(10):
        sign_in(client, f"guess-{attempt}", "wrong", address="10.0.0.7")
    assert sign_in(client, lead_a.username, PASSWORD, address="10.0.0.7").status_code == 429
    assert sign_in(client, lead_a.username, PASSWORD, address="10.0.0.8").status_code == 302  # another address


def test_a_success_resets_the_count(client, engineer_a):
    for _attempt in range(9):
        sign_in(client, engineer_a.username, "wrong")
    assert sign_in(client, engineer_a.username, PASSWORD).status_code == 302
    client.logout()
    assert not AccessAttempt.objects.filter(username=engineer_a.username).exists()
    for _attempt in range(9):
        assert sign_in(client, engineer_a.username, "wrong").status_code == 200
    assert sign_in(client, engineer_a.username, PASSWORD).status_code == 302
