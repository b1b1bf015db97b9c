"""Failed API bearer tokens (issue 17): past API_TOKEN_FAILURE_LIMIT failures from one client address in a
window, the address is answered 429 with Retry-After until the window ends, whatever token it presents;
other addresses are not affected; an IPv6 client is counted by its /64."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from rest_framework.test import APIClient, APIRequestFactory

from teams.authentication import HashedTokenAuthentication, failure_window, throttled_address
from teams.models import ApiToken, TokenFailures

pytestmark = pytest.mark.django_db
URL = "/api/v1/teams/"
# 7 minutes into a 15-minute window (windows are aligned to the epoch): 8 minutes are left.
NOW = datetime(2026, 3, 9, 10, 7, tzinfo=UTC)


@pytest.fixture(autouse=True)
def frozen_clock(settings):
    settings.API_TOKEN_FAILURE_LIMIT = 5
    settings.API_TOKEN_FAILURE_WINDOW_MINUTES = 15
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def good_token(engineer_a):
    return ApiToken.issue(user=engineer_a, name="ci")[1]


def call(token, address="10.0.0.1", **extra):
    return APIClient().get(URL, HTTP_AUTHORIZATION=f"Bearer {token}", REMOTE_ADDR=address, **extra)


def test_past_the_limit_the_address_gets_429_with_retry_after_even_with_a_good_token(good_token, frozen_clock):
    for _attempt in range(5):
        response = call("chk_wrong")
        assert response.status_code == 401
    refused = call("chk_wrong")
    assert refused.status_code == 429
    assert refused["Retry-After"] == str(8 * 60)
    assert "Too many failed API tokens from this address" in refused.json()["detail"]
    assert call(good_token).status_code == 429  # a hit is not told from a miss while refused
    assert call(good_token, address="10.0.0.2").status_code == 200  # another address is not affected
    frozen_clock.move_to(NOW + timedelta(minutes=7, seconds=59))
    assert call(good_token)["Retry-After"] == "1"
    frozen_clock.move_to(NOW + timedelta(minutes=8))  # the window has ended
    assert call(good_token).status_code == 200


def test_good_tokens_are_never_counted_and_every_bad_one_is(good_token):
    for _attempt in range(20):
        assert call(good_token).status_code == 200
    assert not TokenFailures.objects.exists()
    statuses = [call("chk_wrong").status_code for _attempt in range(8)]
    assert statuses == [401] * 5 + [429] * 3
    assert TokenFailures.objects.get(address="10.0.0.1").failures == 8


def test_a_token_that_is_not_text_counts_as_a_failure():
    for _attempt in range(5):
        assert APIClient().get(URL, HTTP_AUTHORIZATION=b"Bearer \xff\xfe", REMOTE_ADDR="10.0.0.3").status_code == 401
    assert call("chk_wrong", address="10.0.0.3").status_code == 429


def test_an_ipv6_client_is_counted_by_its_slash_64(good_token):
    for host in range(5):
        assert call("chk_wrong", address=f"2001:db8:1:2::{host + 1}").status_code == 401
    assert call(good_token, address="2001:db8:1:2:ffff::9").status_code == 429
    assert call(good_token, address="2001:db8:1:3::1").status_code == 200
    assert throttled_address("2001:db8:1:2:ffff::9") == "2001:db8:1:2::"
    assert throttled_address("not an address") == "::"


def test_behind_a_trusted_proxy_the_address_is_the_hop_the_proxy_appended(settings, good_token):
    settings.TRUST_X_FORWARDED_FOR = True
    for attempt in range(5):  # the client writes a new first hop each time; the proxy's last hop is its own
        call("chk_wrong", address="192.0.2.1", HTTP_X_FORWARDED_FOR=f"198.51.100.{attempt}, 203.0.113.7")
    assert call(good_token, address="192.0.2.1", HTTP_X_FORWARDED_FOR="203.0.113.7").status_code == 429
    assert call(good_token, address="192.0.2.1", HTTP_X_FORWARDED_FOR="203.0.113.8").status_code == 200


def test_ended_windows_are_forgotten_when_the_next_failure_is_counted(frozen_clock):
    call("chk_wrong", address="10.0.0.4")
    frozen_clock.move_to(NOW + timedelta(minutes=30))
    call("chk_wrong", address="10.0.0.5")
    assert list(TokenFailures.objects.values_list("address", "window_start")) == [
        ("10.0.0.5", failure_window(NOW + timedelta(minutes=30))[0])]


def test_session_users_and_requests_without_a_token_are_never_counted(client, engineer_a):
    client.force_login(engineer_a)
    for _attempt in range(8):
        assert client.get(URL).status_code == 200
        assert APIClient().get(URL).status_code in (401, 403)
    assert not TokenFailures.objects.exists()


def test_a_good_token_costs_one_query_with_its_user_and_its_address_count(good_token, engineer_a,
                                                                           django_assert_num_queries):
    request = APIRequestFactory().get(URL, HTTP_AUTHORIZATION=f"Bearer {good_token}", REMOTE_ADDR="10.0.0.1")
    HashedTokenAuthentication().authenticate(request)  # the first use writes last_used_at (then once a minute)
    with django_assert_num_queries(1):
        user, _token = HashedTokenAuthentication().authenticate(request)
    assert user == engineer_a
