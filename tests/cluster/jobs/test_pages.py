"""The jobs pages: a list scoped by role with filters, sort and pages; a job's facts, KPIs and chart."""

from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from cluster.jobs.services import JobInput, job_upsert
from cluster.models import Gpu, JobSource, JobState, MinuteRollup
from cluster.telemetry import charts
from teams.models import Project
from tests.conftest import T0

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)
LIST_URL = reverse("cluster:job-list")
LIST_QUERIES = 10  # session, user, groups, count, page rows, team, project and model choices, nav memberships, unread
DETAIL_QUERIES = 10  # session, user, groups, job, allocations, minute rollups, runs, nav memberships, unread,
# and the GPUs' SM activity beside GPU % (issue 16)


def make_job(team, external_id, *, start=T0, minutes=60, submit_wait=5, state=JobState.COMPLETED, gpus=None,
             gpu_count=Decimal(1), model=None, user="alice", project=None, source=JobSource.SLURM, name=""):
    end = start + minutes * MINUTE if start is not None and state != JobState.RUNNING else None
    job, _outcome = job_upsert(JobInput(
        source=source, external_id=external_id, start_time=start, team=team, project=project, name=name, user=user,
        state=state, submit_time=(start or T0) - submit_wait * MINUTE, end_time=end, gpus=gpus,
        gpu_count=Decimal(len(gpus)) if gpus else gpu_count, gpu_model=model,
    ))
    return job


def rollups(gpus, start, utils, *, covered_s=60):
    MinuteRollup.objects.bulk_create(
        MinuteRollup(
            gpu=gpu, bucket=start + m * MINUTE, covered_s=covered_s, util_covered_s=covered_s, sample_count=6,
            util_mean=util, util_max=min(100, util + 10), mem_used_max_mib=1024,
        )
        for gpu in gpus for m, util in enumerate(utils)
    )


def row_of(body, job):
    """The HTML of a job's row in the list."""
    row = body[body.index(f'data-job="{job.pk}"'):]
    return row[:row.index("</tr>")]


def listed(response):
    return [job.external_id for job in response.context["jobs"]]


@pytest.fixture
def jobs(team_a, team_b, small_cluster):
    """Team A: three runs (one on h200-a's two GPUs, one unplaced L40S, one pending); team B: two."""
    h200_gpus = list(Gpu.objects.filter(node__hostname="h200-a").order_by("index"))
    alpha_pre = Project.objects.get(slug="alpha-pre")
    return {
        "a-train": make_job(team_a, "1001", gpus=h200_gpus, user="ann", project=alpha_pre, name="pretrain"),
        "a-infer": make_job(
            team_a, "1002", start=T0 + 2 * 60 * MINUTE, model=small_cluster["l40s"], gpu_count=Decimal("0.5"),
            user="bob", state=JobState.FAILED,
        ),
        "a-pending": make_job(team_a, "1003", start=None, state=JobState.PENDING, user="ann"),
        "b-one": make_job(team_b, "2001", start=T0 + 60 * MINUTE, user="bea"),
        "b-two": make_job(team_b, "2002", start=T0 + 3 * 60 * MINUTE, user="bea", state=JobState.RUNNING),
    }


# --- scope


def test_an_engineer_sees_only_their_teams_jobs(client, engineer_a, jobs):
    client.force_login(engineer_a)
    response = client.get(LIST_URL)
    assert response.status_code == 200
    assert sorted(listed(response)) == ["1001", "1002", "1003"]
    body = response.content.decode()
    assert "Team Beta" not in body and "2001" not in body


def test_a_lead_of_another_team_sees_only_theirs(client, lead_b, engineer_a, jobs):
    client.force_login(lead_b)
    assert sorted(listed(client.get(LIST_URL))) == ["2001", "2002"]


@pytest.mark.parametrize("who", ["admin_user", "finance_user"])
def test_admin_and_finance_see_every_teams_jobs(client, request, who, jobs):
    client.force_login(request.getfixturevalue(who))
    assert sorted(listed(client.get(LIST_URL))) == ["1001", "1002", "1003", "2001", "2002"]


def test_another_teams_job_and_an_unknown_one_are_404(client, engineer_a, jobs):
    client.force_login(engineer_a)
    assert client.get(reverse("cluster:job-detail", args=[jobs["b-one"].pk])).status_code == 404
    assert client.get(reverse("cluster:job-detail", args=[999_999])).status_code == 404
    assert client.get(reverse("cluster:job-detail", args=[jobs["a-train"].pk])).status_code == 200


def test_the_team_filter_offers_only_visible_teams(client, engineer_a, jobs):
    client.force_login(engineer_a)
    response = client.get(LIST_URL, {"team": "beta"})
    assert "team" in response.context["form"].errors  # not a choice for them: refused, not applied
    assert sorted(listed(response)) == ["1001", "1002", "1003"]


def test_every_signed_in_role_has_the_jobs_entry(client, engineer_a, finance_user):
    for user in (engineer_a, finance_user):
        client.force_login(user)
        assert f'href="{LIST_URL}" data-nav="jobs"' in client.get(reverse("cluster:inventory")).content.decode()


# --- list columns, filters, sort, pages


def test_the_list_shows_state_gpus_and_durations(client, lead_a, jobs):
    client.force_login(lead_a)
    body = client.get(LIST_URL).content.decode()
    row = row_of(body, jobs["a-infer"])
    assert 'badge badge-red">Failed' in row
    assert "0.5 <small" in row and "× L40S" in row
    assert "5 min 00 s" in row  # queue wait
    assert "1 h 00 min" in row  # run time
    assert "× H200" in row_of(body, jobs["a-train"])


def test_a_running_job_shows_its_run_time_so_far(client, lead_b, jobs):
    client.force_login(lead_b)
    body = client.get(LIST_URL).content.decode()
    row = row_of(body, jobs["b-two"])
    assert "running" in row and "so far" in row


def test_an_observed_job_shows_the_gpus_its_allocations_name(client, admin_user, small_cluster):
    gpus = list(Gpu.objects.filter(node__hostname="h200-b"))
    job, _ = job_upsert(JobInput(
        source=JobSource.OBSERVED, external_id="pid-4242", start_time=T0, team=None, user="mystery",
        state=JobState.RUNNING, gpus=gpus,
    ))
    client.force_login(admin_user)
    row = row_of(client.get(LIST_URL).content.decode(), job)
    assert "2 <small class=\"muted\">× H200</small>" in row
    assert "Observed on the GPUs" in row
    assert client.get(reverse("cluster:job-detail", args=[job.pk])).status_code == 200


@pytest.mark.parametrize(("query", "expected"), [
    ({"team": "beta"}, ["2001", "2002"]),
    ({"project": "PROJECT"}, ["1001"]),
    ({"user": "bea"}, ["2001", "2002"]),
    ({"state": "failed"}, ["1002"]),
    ({"gpu_model": "L40S"}, ["1002"]),  # an unplaced allocation's model
    ({"gpu_model": "H200"}, ["1001"]),  # placed on H200 GPUs
    ({"started_after": "2026-11-02", "started_before": "2026-11-02"}, ["1001", "1002", "2001", "2002"]),
    ({"user": "ann", "state": "pending"}, ["1003"]),
])
def test_filters(client, admin_user, jobs, query, expected):
    if query.get("project") == "PROJECT":
        query = {"project": str(Project.objects.get(slug="alpha-pre").pk)}
    client.force_login(admin_user)
    response = client.get(LIST_URL, query)
    assert response.context["form"].errors == {}
    assert sorted(listed(response)) == expected


def test_start_dates_are_business_zone_days(client, admin_user, team_a, settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "Asia/Shanghai"  # UTC+8: 2 Nov begins at 1 Nov 16:00 UTC
    make_job(team_a, "late-on-1st", start=T0 - 9 * 60 * MINUTE)  # 1 Nov 15:00 UTC = 1 Nov 23:00 there
    make_job(team_a, "early-on-2nd", start=T0 - 7 * 60 * MINUTE)  # 1 Nov 17:00 UTC = 2 Nov 01:00 there
    make_job(team_a, "late-on-2nd", start=T0 + 15 * 60 * MINUTE)  # 2 Nov 15:00 UTC = 2 Nov 23:00 there
    make_job(team_a, "early-on-3rd", start=T0 + 17 * 60 * MINUTE)  # 3 Nov 01:00 there
    client.force_login(admin_user)
    response = client.get(LIST_URL, {"started_after": "2026-11-02", "started_before": "2026-11-02"})
    assert sorted(listed(response)) == ["early-on-2nd", "late-on-2nd"]
    assert sorted(listed(client.get(LIST_URL, {"started_before": "2026-11-01"}))) == ["late-on-1st"]


@pytest.mark.parametrize(("sort", "expected"), [
    ("", ["b-two", "a-infer", "b-one", "a-pending", "a-train"]),  # newest submission first, then newest id
    ("submit", ["a-train", "a-pending", "b-one", "a-infer", "b-two"]),  # a tie: oldest id first
    ("start", ["a-train", "b-one", "a-infer", "b-two", "a-pending"]),  # never started: last
    ("-start", ["b-two", "a-infer", "b-one", "a-train", "a-pending"]),
    ("end", ["a-train", "b-one", "a-infer", "a-pending", "b-two"]),  # no end yet: last, by id
    ("-gpus", ["a-train", "b-two", "b-one", "a-pending", "a-infer"]),
    ("state", ["a-pending", "b-two", "a-train", "b-one", "a-infer"]),  # pending, running, completed…, failed
])
def test_sort_orders(client, admin_user, jobs, sort, expected):
    client.force_login(admin_user)
    response = client.get(LIST_URL, {"sort": sort} if sort else {})
    by_pk = {job.pk: name for name, job in jobs.items()}
    assert [by_pk[job.pk] for job in response.context["jobs"]] == expected


def test_sort_headers_link_the_other_direction_and_keep_the_filters(client, admin_user, jobs):
    client.force_login(admin_user)
    body = client.get(LIST_URL, {"user": "bea", "sort": "start", "page": "1"}).content.decode()
    assert 'aria-sort="ascending"><a href="?user=bea&amp;sort=-start" data-sort="start">' in body
    assert '<a href="?user=bea&amp;sort=state" data-sort="state">' in body
    assert '<input type="hidden" name="sort" value="start">' in body


def test_a_bad_sort_names_the_parameter_and_falls_back_to_newest_first(client, admin_user, jobs):
    client.force_login(admin_user)
    response = client.get(LIST_URL, {"sort": "name; DROP TABLE"})
    assert response.status_code == 200
    assert response.context["sort"] == "-submit"
    assert listed(response)[0] == "2002"
    body = response.content.decode()
    assert "The “sort” parameter must be one of: submit, -submit, start, -start, end, -end, gpus, -gpus, state, -state." in body


def test_a_bad_date_names_the_parameter(client, admin_user, jobs):
    client.force_login(admin_user)
    response = client.get(LIST_URL, {"started_after": "yesterday", "state": "failed"})
    assert "The “started_after” parameter must be a date written YYYY-MM-DD" in response.content.decode()
    assert listed(response) == ["1002"]  # the valid filters still apply
    reversed_range = client.get(LIST_URL, {"started_after": "2026-11-03", "started_before": "2026-11-02"})
    assert "started_before" in reversed_range.context["form"].errors


def test_pages_of_fifty_keep_the_filters(client, engineer_a, team_a):
    for number in range(120):
        make_job(team_a, f"bulk-{number:03}", start=T0 + number * MINUTE, user="bulk")
    client.force_login(engineer_a)
    first = client.get(LIST_URL, {"user": "bulk", "sort": "start"})
    assert listed(first) == [f"bulk-{n:03}" for n in range(50)]
    assert 'rel="next" href="?user=bulk&amp;sort=start&amp;page=2"' in first.content.decode()
    third = client.get(LIST_URL, {"user": "bulk", "sort": "start", "page": "3"})
    assert listed(third) == [f"bulk-{n:03}" for n in range(100, 120)]
    assert "page 3 of 3" in third.content.decode()
    assert listed(client.get(LIST_URL, {"user": "bulk", "sort": "start", "page": "99"})) == listed(third)
    assert listed(client.get(LIST_URL, {"user": "bulk", "sort": "start", "page": "x"})) == listed(first)


# --- the job page


@pytest.fixture
def measured_job(team_a, small_cluster):
    """Job 1001 on h200-a's two GPUs for ten minutes. GPU 0: busy 6 min, idle 2, then 2 without samples;
    GPU 1: busy 10 min, half of each minute covered. Allocated 20 GPU-min = 1/3 card-hour; busy 6 + 5 =
    11 GPU-min; idle 2; unmeasured 2 + 5 = 7; efficiency 11/20 = 55 %."""
    gpus = list(Gpu.objects.filter(node__hostname="h200-a").order_by("index"))
    job = make_job(team_a, "1001", gpus=gpus, minutes=10, submit_wait=90, name="pretrain")
    rollups([gpus[0]], T0, [60.0] * 6 + [1.0] * 2)
    rollups([gpus[1]], T0, [90.0] * 10, covered_s=30)
    rollups(gpus, T0 + 10 * MINUTE, [50.0] * 5)  # after the job: not its usage
    return job


def test_the_job_page_shows_its_kpis(client, lead_a, measured_job):
    client.force_login(lead_a)
    response = client.get(reverse("cluster:job-detail", args=[measured_job.pk]))
    assert response.status_code == 200
    usage = response.context["kpis"].usage
    assert usage.allocated_card_hours == Fraction(20, 60)
    assert usage.busy_card_hours == Fraction(11, 60)
    assert usage.idle_card_hours == Fraction(2, 60)
    assert usage.unmeasured_card_hours == Fraction(7, 60)
    assert usage.efficiency == Fraction(11, 20)
    shown = response.context["usage"]
    assert shown == {
        "allocated": Decimal("0.33"), "busy": Decimal("0.18"), "idle": Decimal("0.03"),
        "unmeasured": Decimal("0.12"), "efficiency": Decimal("55.0"),
    }
    body = response.content.decode()
    kpis = body[body.index('data-testid="job-kpis"'):]
    assert "1 h 30 min" in kpis  # queue wait
    assert "10 min 00 s" in kpis  # run time
    assert "1 h 40 min" in kpis  # turnaround
    assert "55.0 %" in kpis
    allocations = body[body.index('data-testid="job-allocations"'):]
    assert "h200-a</a> · GPU 0" in allocations and "h200-a</a> · GPU 1" in allocations


def test_the_job_chart_draws_its_gpus_over_the_run_with_the_idle_threshold(client, lead_a, measured_job):
    client.force_login(lead_a)
    response = client.get(reverse("cluster:job-detail", args=[measured_job.pk]))
    chart = response.context["utilization_chart"]
    lines = [trace for trace in chart["data"] if trace["meta"]["role"] == charts.LINE]
    assert [line["name"] for line in lines] == ["h200-a · GPU 0", "h200-a · GPU 1"]
    assert lines[0]["x"][0] == int(T0.timestamp() * 1000)
    assert lines[0]["y"] == [60.0] * 6 + [1.0] * 2  # only the run's minutes
    assert chart["layout"]["xaxis"]["range"] == [int(T0.timestamp() * 1000), int((T0 + 10 * MINUTE).timestamp() * 1000)]
    threshold = [shape for shape in chart["layout"]["shapes"] if shape.get("name") == charts.IDLE_THRESHOLD]
    assert threshold and threshold[0]["y0"] == 5
    assert 'id="chart-job-utilization" type="application/json"' in response.content.decode()


def test_an_unplaced_job_is_all_unmeasured_with_an_empty_chart(client, lead_a, jobs):
    client.force_login(lead_a)
    response = client.get(reverse("cluster:job-detail", args=[jobs["a-infer"].pk]))
    usage = response.context["kpis"].usage
    assert usage.allocated_card_hours == Fraction(1, 2)  # half a GPU for an hour
    assert usage.unmeasured_card_hours == Fraction(1, 2)
    assert response.context["usage"]["efficiency"] == Decimal("0.0")
    body = response.content.decode()
    assert "<em>unplaced</em> <small class=\"muted\">L40S</small>" in body
    assert "No samples from this job" in str(response.context["utilization_chart"]["layout"]["annotations"])


def test_a_requeued_job_shows_its_interruptions_and_recovery(client, lead_a, team_a):
    make_job(team_a, "77", start=T0, minutes=30, state=JobState.PREEMPTED)  # ends 00:30
    make_job(team_a, "77", start=T0 + 45 * MINUTE, minutes=30, state=JobState.FAILED)  # ends 01:15
    last = make_job(team_a, "77", start=T0 + 2 * 60 * MINUTE, minutes=30)  # resumes 02:00
    make_job(team_a, "78", start=T0 + 3 * 60 * MINUTE, minutes=30, state=JobState.FAILED)  # another job
    client.force_login(lead_a)
    response = client.get(reverse("cluster:job-detail", args=[last.pk]))
    interruptions = response.context["interruptions"]
    assert interruptions["count"] == 2
    assert interruptions["recoveries"] == ["15 min 00 s", "45 min 00 s"]
    assert interruptions["total_recovery"] == "1 h 00 min"
    body = response.content.decode()
    assert body.count("<tr") - body[:body.index('data-testid="job-runs"')].count("<tr") == 4  # header + 3 runs
    assert "(this run)" in body


def test_a_running_jobs_run_time_counts_to_now(client, lead_b, jobs, monkeypatch):
    monkeypatch.setattr("cluster.jobs.views.timezone.now", lambda: T0 + 4 * 60 * MINUTE + 30 * MINUTE)
    client.force_login(lead_b)
    response = client.get(reverse("cluster:job-detail", args=[jobs["b-two"].pk]))
    assert response.context["times"] == {
        "queue_wait": "5 min 00 s", "run_time": "1 h 30 min", "run_time_so_far": True, "turnaround": "—",
    }  # started at 03:00, now 04:30
    assert response.context["kpis"].usage.allocated_card_hours == Fraction(3, 2)  # one unplaced GPU, 1.5 h
    assert "still running" in response.content.decode()


# --- query counts


def _count(client, url, params=None):
    with CaptureQueriesContext(connection) as queries:
        assert client.get(url, params or {}).status_code == 200
    return len(queries)


def test_the_list_query_count_is_pinned_and_does_not_grow_with_rows(client, engineer_a, team_a, small_cluster):
    client.force_login(engineer_a)
    make_job(team_a, "first", gpus=list(Gpu.objects.filter(node__hostname="h200-a")))
    small = _count(client, LIST_URL)
    for number in range(80):
        make_job(team_a, f"many-{number}", start=T0 + number * MINUTE, gpus=list(Gpu.objects.all()[:2]))
    big = _count(client, LIST_URL)
    assert small == big == LIST_QUERIES
    assert _count(client, LIST_URL, {"sort": "-gpus", "page": "2"}) == LIST_QUERIES


def test_the_detail_query_count_is_pinned_and_does_not_grow_with_gpus_minutes_or_runs(
    client, lead_a, team_a, small_cluster
):
    client.force_login(lead_a)
    one = make_job(team_a, "small", gpus=[Gpu.objects.first()], minutes=2)
    small = _count(client, reverse("cluster:job-detail", args=[one.pk]))
    gpus = list(Gpu.objects.all())
    for run in range(4):
        make_job(team_a, "big", start=T0 + run * 2 * 60 * MINUTE, gpus=gpus, minutes=90, state=JobState.PREEMPTED)
    big = make_job(team_a, "big", start=T0 + 10 * 60 * MINUTE, gpus=gpus, minutes=90)
    rollups(gpus, T0 + 10 * 60 * MINUTE, [40.0] * 90)
    assert _count(client, reverse("cluster:job-detail", args=[big.pk])) == small == DETAIL_QUERIES
