"""The supported time window (issue 12 §3, DESIGN.md §3): a time from outside it is a 400 naming the field
and the window, with nothing saved; a stored time outside it still comes back as valid RFC 3339."""

import re
from datetime import UTC, date, datetime

import pytest
import time_machine
from django.core.management import CommandError, call_command

from accounting.models import MoneyChange, Quota, RateCard
from accounting.money.close import parse_period
from accounting.money.forms import PeriodForm, RateCardForm
from cluster.bookings.forms import WeekForm
from cluster.models import Allocation, Job
from tests.conftest import T0

pytestmark = [pytest.mark.django_db, pytest.mark.clock]

WINDOW = "2000-01-01T00:00:00Z … 2100-01-01T00:00:00Z"
REPRO = {"source": "api", "job_id": "x", "team": "alpha", "user": "alice", "gpu_count": "1", "state": "running",
         "start_time": "0001-01-01T00:00:00Z"}
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")


@pytest.fixture
def frozen():
    with time_machine.travel(T0, tick=False):
        yield


def test_the_issues_post_is_a_400_naming_start_time(api, lead_a, frozen):
    response = api.as_user(lead_a).post("/api/v1/jobs/", REPRO, format="json")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("start_time:") and WINDOW in response.json()["detail"]
    assert not Job.objects.exists()


def test_a_job_more_than_a_day_ahead_is_refused(api, lead_a, frozen):
    body = {**REPRO, "start_time": "2026-11-03T00:00:01Z"}
    response = api.as_user(lead_a).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400 and "start_time" in response.json()
    assert "2026-11-03T00:00:00Z" in response.json()["detail"]
    ok = api.as_user(lead_a).post("/api/v1/jobs/", {**REPRO, "start_time": "2026-11-02T23:00:00Z"}, format="json")
    assert ok.status_code == 201


@pytest.mark.parametrize("name", ["submit_time", "end_time"])
def test_every_job_time_is_held_to_the_window(api, lead_a, frozen, name):
    body = {**REPRO, "start_time": "2026-11-01T00:00:00Z", name: "9999-12-31T23:59:59Z"}
    response = api.as_user(lead_a).post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 400 and name in response.json()
    assert not Job.objects.exists()


def test_list_filters_are_held_to_the_window(api, lead_a, frozen):
    response = api.as_user(lead_a).get("/api/v1/jobs/", {"started_after": "0001-01-01T00:00:00Z"})
    assert response.status_code == 400 and "started_after" in response.json()
    assert WINDOW in response.json()["detail"]


def test_the_availability_query_is_held_to_the_window(api, engineer_a, small_cluster, frozen):
    response = api.as_user(engineer_a).get("/api/v1/availability/", {
        "start": "9999-12-31T00:00:00Z", "end": "9999-12-31T02:00:00Z", "count": 1, "model": "H200"})
    assert response.status_code == 400 and "start" in response.json()


def test_a_year_one_quota_is_a_400_and_saves_nothing(api, finance_user, team_a, frozen):
    body = {"team": "alpha", "period_start": "0001-01-01", "expires": "0001-01-02", "card_hours": "10"}
    response = api.as_user(finance_user).post("/api/v1/quotas/", body, format="json")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("period_start:") and "expires" in response.json()
    assert not Quota.objects.exists() and not MoneyChange.objects.exists()
    assert api.as_user(finance_user).get("/api/v1/quotas/").status_code == 200


def test_rate_card_validity_is_held_to_the_window(api, finance_user, small_cluster, frozen):
    body = {"gpu_model": "H200", "valid_from": "1999-12-31", "price_per_card_hour": "2.5"}
    response = api.as_user(finance_user).post("/api/v1/rate-cards/", body, format="json")
    assert response.status_code == 400 and "valid_from" in response.json()
    assert not RateCard.objects.exists()


def test_the_close_period_is_held_to_the_window(api, finance_user, frozen):
    response = api.as_user(finance_user).post("/api/v1/statements/close/", {"period": "1999-12"}, format="json")
    assert response.status_code == 400 and response.json()["detail"].startswith("period:")
    with pytest.raises(ValueError, match="outside the supported window"):
        parse_period("2100-01")
    with pytest.raises(CommandError, match="period"):
        call_command("close_period", "0001-01")
    with pytest.raises(CommandError, match="--start"):
        call_command("recompute_usage", "--start", "0001-01-01T00:00:00Z", "--end", "2026-11-02T00:00:00Z")


def test_forms_show_a_field_error(small_cluster):
    assert "period" in PeriodForm(data={"period": "1999-12"}).errors
    card = RateCardForm(data={"gpu_model": small_cluster["h200"].pk, "valid_from": "0001-01-01",
                              "price_per_card_hour": "1"})
    assert "valid_from" in card.errors
    assert WeekForm(data={"week": "0001-01-01"}).chosen(today=date(2026, 11, 2))[0] == date(2026, 11, 2)


# ---- times returned -------------------------------------------------------------------------------------

@pytest.fixture
def legacy_job(team_a, small_cluster):
    """A job stored before the window was enforced (written straight into the table, no validation)."""
    start = datetime(1, 1, 1, tzinfo=UTC)
    job = Job.objects.create(source="api", external_id="legacy", team=team_a, state="running", start_time=start,
                             gpu_count=1)
    Allocation.objects.create(job=job, share=840_000, start=start)
    return job


@pytest.mark.parametrize("zone", ["UTC", "Asia/Shanghai"])
def test_a_stored_year_one_job_reads_as_rfc3339(api, admin_user, legacy_job, settings, zone, frozen):
    settings.TIME_ZONE = zone
    client = api.as_user(admin_user)
    listed, detail = client.get("/api/v1/jobs/"), client.get(f"/api/v1/jobs/{legacy_job.pk}/")
    assert listed.status_code == 200 and detail.status_code == 200
    for body in (listed.content, detail.content):
        assert b"+08:05" not in body
    row = detail.json()
    assert row["start_time"] == "0001-01-01T00:00:00Z"
    assert row["allocations"][0]["start"] == "0001-01-01T00:00:00Z"
    assert listed.json()["results"][0]["start_time"] == "0001-01-01T00:00:00Z"


def test_a_time_in_the_window_reads_in_the_display_zone(api, admin_user, team_a, settings, frozen):
    settings.TIME_ZONE = "Asia/Shanghai"
    Job.objects.create(source="api", external_id="ok", team=team_a, state="running", start_time=T0)
    row = api.as_user(admin_user).get("/api/v1/jobs/").json()["results"][0]
    assert row["start_time"] == "2026-11-02T08:00:00+08:00" and RFC3339.match(row["start_time"])
