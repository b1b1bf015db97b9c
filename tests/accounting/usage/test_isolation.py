"""No stored row can halt the usage aggregation (issue 12 §3): a job stored (bypassing validation) with a
start in year 1 for team B leaves team A's figures, the close and the quota list standing, and an alert
names it; a GPU-day that fails is isolated, alerted and retried; an open range is decided by the
application's clock, never the database's."""

from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from django.db import connection

from accounting.models import DailyUsage, Quota, UsageDirty
from accounting.money.close import CloseRefused, close_period
from accounting.usage.services import _days_to_redo, aggregate_day, usage_process
from cluster.choices import AlertKind, AlertSubject
from cluster.models import Alert, Allocation, Job
from core.timeutils import business_days
from tests.accounting.usage.usage_day import DAY, NOW

pytestmark = [pytest.mark.django_db, pytest.mark.clock]

YEAR_ONE = datetime(1, 1, 1, tzinfo=UTC)
CLOSE_NOW = datetime(2026, 12, 2, 1, 0, tzinfo=UTC)


def team_rows(team) -> list[tuple]:
    return sorted(DailyUsage.objects.filter(team=team).values_list("day", "gpu_id", "state", "project_id", "ticks"))


def store_year_one_job(team, gpu) -> Job:
    """A job and its allocation written straight into the tables, as a row from before the window was
    enforced would be (no serializer, no service, no validation)."""
    job = Job.objects.create(source="api", external_id="x", user="alice", team=team, gpu_count=1, state="running",
                             start_time=YEAR_ONE)
    Allocation.objects.create(job=job, gpu=gpu, share=840_000, start=YEAR_ONE)
    return job


def open_alerts(subject_type):
    return Alert.objects.open().filter(kind=AlertKind.USAGE_FAILED, subject_type=subject_type)


@pytest.fixture(params=["UTC", "Asia/Shanghai"])
def zone(request, settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = request.param
    settings.TIME_ZONE = request.param
    return request.param


def test_a_year_one_job_of_team_b_leaves_team_a_figures_right(day, team_a, team_b, zone):
    usage_process(now=NOW)
    before = team_rows(team_a)
    assert before
    bad = store_year_one_job(team_b, day["g0"])
    assert not UsageDirty.objects.filter(lo__lt=datetime(2000, 1, 1, tzinfo=UTC)).exists()
    result = usage_process(now=NOW + timedelta(minutes=5))
    aggregate_day(day=DAY, now=NOW + timedelta(minutes=5))  # team A's day, its GPU shared with the bad job
    assert team_rows(team_a) == before
    assert not DailyUsage.objects.filter(team=team_b, gpu=day["g0"], day=DAY).exclude(
        state="unallocated").filter(ticks__gt=3600 * 840_000).exists()
    assert result["bad_jobs"] == 1
    alert = open_alerts(AlertSubject.JOB).get()
    assert alert.subject_id == bad.pk and "x" in alert.subject_label and "0001-01-01T00:00:00Z" in alert.message


def test_the_close_names_the_bad_job_instead_of_failing(day, team_b):
    bad = store_year_one_job(team_b, day["g0"])
    with pytest.raises(CloseRefused) as refused:
        close_period(period=date(2026, 11, 1), now=CLOSE_NOW)
    assert any(f"id {bad.pk}" in problem and "0001-01-01T00:00:00Z" in problem for problem in refused.value.problems)


def test_the_close_api_answers_409_naming_the_job(day, team_b, finance_user, api):
    bad = store_year_one_job(team_b, day["g0"])
    with time_machine.travel(CLOSE_NOW, tick=False):
        response = api.as_user(finance_user).post("/api/v1/statements/close/", {"period": "2026-11"}, format="json")
    assert response.status_code == 409
    assert any(f"id {bad.pk}" in problem for problem in response.json()["problems"])


def test_the_quota_list_stands_with_a_stored_year_one_quota(team_a, team_b, admin_user, lead_b, api):
    Quota.objects.bulk_create([Quota(team=team_a, period_start=date(1, 1, 1), expires=date(1, 1, 2), card_hours=10),
                               Quota(team=team_b, period_start=date(2026, 11, 1), expires=date(2026, 12, 1),
                                     card_hours=10)])
    with time_machine.travel(NOW, tick=False):
        everyone = api.as_user(admin_user).get("/api/v1/quotas/")
        other_team = api.as_user(lead_b).get("/api/v1/quotas/")
    assert everyone.status_code == 200 and len(everyone.json()["results"]) == 2
    assert other_team.status_code == 200 and [row["team"] for row in other_team.json()["results"]] == ["beta"]


def test_the_alert_closes_when_an_admin_deletes_the_job(day, team_b, admin_user, api):
    bad = store_year_one_job(team_b, day["g0"])
    usage_process(now=NOW)
    assert open_alerts(AlertSubject.JOB).exists()
    with time_machine.travel(NOW, tick=False):
        assert api.as_user(admin_user).delete(f"/api/v1/jobs/{bad.pk}/").status_code == 204
    usage_process(now=NOW + timedelta(minutes=5))
    assert not open_alerts(AlertSubject.JOB).exists()
    assert Alert.objects.filter(kind=AlertKind.USAGE_FAILED, subject_id=bad.pk, closed_at__isnull=False).exists()


def test_calendar_arithmetic_is_clamped_to_the_window(zone):
    days = business_days(YEAR_ONE, datetime(2000, 1, 3, tzinfo=UTC))
    assert days[0] == date(2000, 1, 1) and len(days) <= 4  # not 730,000 days from year 1
    assert business_days(datetime(2099, 12, 31, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC))[-1] <= date(2100, 1, 1)


# ---- a GPU-day that fails -------------------------------------------------------------------------------

@pytest.fixture
def failing_gpu(day):
    """A database fault on one GPU's daily rows (a real PostgreSQL trigger, not a mock): writing them fails."""
    gpu = day["g1"]
    with connection.cursor() as cursor:
        cursor.execute(f"""
            CREATE FUNCTION test_fail_gpu() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
                IF NEW.gpu_id = {gpu.pk} THEN RAISE EXCEPTION 'disk on fire'; END IF; RETURN NEW; END $$;
            CREATE TRIGGER test_fail_gpu BEFORE INSERT ON accounting_dailyusage
                FOR EACH ROW EXECUTE FUNCTION test_fail_gpu();
        """)
    yield gpu
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER IF EXISTS test_fail_gpu ON accounting_dailyusage; "
                       "DROP FUNCTION IF EXISTS test_fail_gpu()")


def heal(gpu):
    with connection.cursor() as cursor:
        cursor.execute("DROP TRIGGER test_fail_gpu ON accounting_dailyusage")


def test_a_failing_gpu_day_is_isolated_alerted_and_retried(day, failing_gpu, team_a):
    result = usage_process(now=NOW)
    assert result["failed"] >= 1
    assert DailyUsage.objects.filter(day=DAY, gpu=day["g0"]).exists()  # the others were aggregated
    assert DailyUsage.objects.filter(day=DAY, gpu=day["g2"]).exists()
    assert not DailyUsage.objects.filter(day=DAY, gpu=failing_gpu).exists()
    alert = open_alerts(AlertSubject.GPU).get()
    assert alert.subject_id == failing_gpu.pk and "disk on fire" in alert.message and "n1/1" in alert.subject_label
    assert DAY.isoformat() in alert.details["days"]
    assert UsageDirty.objects.filter(gpu_id=failing_gpu.pk).exists()  # tried again next run
    with pytest.raises(CloseRefused) as refused:
        close_period(period=date(2026, 11, 1), now=CLOSE_NOW)
    assert any("n1/1" in problem and "2026-11-02" in problem for problem in refused.value.problems)

    heal(failing_gpu)
    usage_process(now=NOW + timedelta(minutes=5))
    assert DailyUsage.objects.filter(day=DAY, gpu=failing_gpu).exists()
    assert not open_alerts(AlertSubject.GPU).exists()


# ---- the application's clock, not the database's ----------------------------------------------------------

def test_an_open_range_is_marked_open_and_redone_up_to_the_apps_now(day, team_a):
    UsageDirty.objects.all().delete()
    app_now = datetime(2031, 6, 1, 12, 0, tzinfo=UTC)  # far from the database's clock, whatever it reads
    with time_machine.travel(app_now, tick=False):
        run = Job.objects.create(source="api", external_id="open", team=team_a, state="running",
                                 start_time=app_now - timedelta(days=1))
        Allocation.objects.create(job=run, gpu=day["g0"], share=840_000, start=run.start_time)
    mark = UsageDirty.objects.get()
    assert mark.hi is None and mark.lo == app_now - timedelta(days=1)
    by_day, _unplaced = _days_to_redo([(mark.gpu_id, mark.node_id, mark.lo, mark.hi)], app_now)
    assert sorted(by_day) == [date(2031, 5, 31), date(2031, 6, 1)]
    by_day, _unplaced = _days_to_redo([(mark.gpu_id, mark.node_id, mark.lo, mark.hi)], app_now - timedelta(hours=13))
    assert sorted(by_day) == [date(2031, 5, 31)]
