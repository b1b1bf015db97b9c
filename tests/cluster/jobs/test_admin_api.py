"""Correcting and deleting a job (issue 12 §3): the API's PATCH and DELETE for admins and the leads of the
job's team, the admin site's form, and the usage aggregates following either."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.contrib import admin
from django.test import RequestFactory

from accounting.models import DailyUsage
from accounting.usage.services import usage_process
from cluster.models import Allocation, Job
from tests.accounting.usage.usage_day import DAY, NOW, at, hours, make_day

pytestmark = [pytest.mark.django_db, pytest.mark.clock]


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def day(team_a, team_b, engineer_a):
    """The hand-made day of the usage tests (tests/accounting/usage/usage_day.py)."""
    return make_day(team_a, team_b, engineer_a)


@pytest.fixture
def a_train(day):
    """Team A's job on n1/0, 01:00–03:00 of the hand-made day, aggregated."""
    usage_process(now=NOW)
    return Job.objects.get(external_id="a-train-1")


def team_hours(team, gpu) -> dict:
    return {row.state: hours(row.ticks) for row in DailyUsage.objects.filter(day=DAY, gpu=gpu, team=team)}


def test_an_admin_deletes_a_job_and_the_usage_follows(api, admin_user, a_train, team_a, day, frozen):
    assert sum(team_hours(team_a, day["g0"]).values()) == 2
    response = api.as_user(admin_user).delete(f"/api/v1/jobs/{a_train.pk}/")
    assert response.status_code == 204
    assert not Job.objects.filter(pk=a_train.pk).exists() and not Allocation.objects.filter(job_id=a_train.pk).exists()
    usage_process(now=NOW + timedelta(minutes=5))
    assert team_hours(team_a, day["g0"]) == {}


def test_the_lead_of_the_jobs_team_deletes_it(api, lead_a, a_train, frozen):
    assert api.as_user(lead_a).delete(f"/api/v1/jobs/{a_train.pk}/").status_code == 204


def test_another_teams_lead_gets_a_404_and_an_engineer_a_403(api, lead_b, engineer_a, finance_user, a_train, frozen):
    assert api.as_user(lead_b).delete(f"/api/v1/jobs/{a_train.pk}/").status_code == 404
    assert api.as_user(engineer_a).delete(f"/api/v1/jobs/{a_train.pk}/").status_code == 403
    assert api.as_user(finance_user).delete(f"/api/v1/jobs/{a_train.pk}/").status_code == 403
    assert Job.objects.filter(pk=a_train.pk).exists()


def test_a_patch_corrects_the_end_and_the_usage_follows(api, admin_user, a_train, team_a, day, frozen):
    response = api.as_user(admin_user).patch(f"/api/v1/jobs/{a_train.pk}/", {"end_time": "2026-11-02T02:00:00Z"},
                                             format="json")
    assert response.status_code == 200 and response.json()["end_time"] == "2026-11-02T02:00:00Z"
    assert Allocation.objects.get(job=a_train).end == at(2)
    usage_process(now=NOW + timedelta(minutes=5))
    assert sum(team_hours(team_a, day["g0"]).values()) == 1


def test_a_patch_to_a_time_outside_the_window_is_refused(api, admin_user, a_train, frozen):
    response = api.as_user(admin_user).patch(f"/api/v1/jobs/{a_train.pk}/", {"end_time": "9999-01-01T00:00:00Z"},
                                             format="json")
    assert response.status_code == 400 and response.json()["detail"].startswith("end_time:")
    assert Job.objects.get(pk=a_train.pk).end_time == at(3)


# ---- the admin site -------------------------------------------------------------------------------------

@pytest.fixture
def superuser(make_user):
    return make_user("root", is_staff=True, is_superuser=True)


def admin_form(job, user, **changes):
    job_admin = admin.site._registry[Job]
    request = RequestFactory().post("/")
    request.user = user
    form_class = job_admin.get_form(request, obj=job, change=True)
    data = {}
    for name, value in {**form_class(instance=job).initial, "team": job.team_id, **changes}.items():
        if isinstance(value, datetime):
            value = (value.strftime("%Y-%m-%d"), value.strftime("%H:%M:%S"))
        if isinstance(value, tuple):  # the admin's split date and time inputs
            data[f"{name}_0"], data[f"{name}_1"] = value
        elif value is not None:
            data[name] = value
    return job_admin, request, form_class(data=data, instance=job)


def test_the_admin_form_shows_a_field_error_for_a_year_one_start(superuser, a_train, frozen):
    _admin, _request, form = admin_form(a_train, superuser, start_time=("0001-01-01", "00:00:00"))
    assert not form.is_valid()
    assert "outside the supported window" in form.errors["start_time"][0]


def test_an_admin_site_correction_moves_the_allocations_and_the_usage(superuser, a_train, team_a, day, frozen):
    job_admin, request, form = admin_form(a_train, superuser, start_time=("2026-11-02", "02:00:00"),
                                          end_time=("2026-11-02", "03:00:00"))
    assert form.is_valid(), form.errors
    job = form.save(commit=False)  # as the admin's change view does
    job_admin.save_model(request, job, form, change=True)
    job_admin.save_related(request, form, formsets=[], change=True)
    allocation = Allocation.objects.get(job=job)
    assert (allocation.start, allocation.end) == (datetime(2026, 11, 2, 2, tzinfo=UTC), at(3))
    usage_process(now=NOW + timedelta(minutes=5))
    assert sum(team_hours(team_a, day["g0"]).values()) == 1
