"""The input-bound hint (issue 19) where people read it: the job page, and the idle ranking's job rows
(board, idle allocations, team page), each for one query however many rows."""

from datetime import date
from decimal import Decimal

import pytest
from django.template.loader import render_to_string
from django.urls import reverse

from accounting.money.idle_ranking import IdleRow, mark_input_bound
from cluster.models import Gpu
from tests.cluster.jobs.test_pages import DETAIL_QUERIES, MINUTE, make_job, rollups
from tests.conftest import T0

pytestmark = pytest.mark.django_db

DAY = date(2026, 11, 2)
START = T0 + 60 * MINUTE  # inside business day DAY in UTC and in Asia/Shanghai
SWINGING = ([92.0] * 4 + [2.0] * 2) * 20  # 2 hours: 4 minutes computing, 2 waiting
STEADY = [92.0] * 120


def h200_gpus():
    """The four H200s of the small cluster (two nodes of two)."""
    return list(Gpu.objects.filter(model__short_name="H200").order_by("node__hostname", "index"))


def row_of(job) -> IdleRow:
    return IdleRow(kind="job", object_id=job.pk, label=job.external_id, team="Alpha", project="", user="alice",
                   gpus=Decimal(2), holders=1, idle_card_hours=Decimal(1), allocated_card_hours=Decimal(4),
                   idle_share=Decimal(25), idle_cost=None, idle_ticks=1)


def test_the_job_page_flags_a_swinging_job_with_its_evidence_in_the_same_queries(
        client, lead_a, team_a, small_cluster, django_assert_num_queries):
    gpus = h200_gpus()[:2]
    job = make_job(team_a, "swing", start=START, minutes=120, gpus=gpus)
    rollups(gpus, START, SWINGING)
    client.force_login(lead_a)
    url = reverse("cluster:job-detail", args=[job.pk])
    client.get(url)
    with django_assert_num_queries(DETAIL_QUERIES):
        response = client.get(url)
    assert response.status_code == 200
    verdict = response.context["input_bound"]
    assert verdict.flagged and (verdict.measured_minutes, verdict.dips, verdict.dip_minutes) == (120, 19, 38)
    page = response.content.decode()
    assert 'data-testid="input-bound"' in page and "Likely waiting on data or checkpoints" in page
    assert "31.7 % of its 120 measured minutes lie in 19 short dips" in page


def test_the_job_page_of_a_steady_job_shows_no_hint(client, lead_a, team_a, small_cluster):
    gpus = h200_gpus()[:2]
    job = make_job(team_a, "steady", start=START, minutes=120, gpus=gpus)
    rollups(gpus, START, STEADY)
    client.force_login(lead_a)
    response = client.get(reverse("cluster:job-detail", args=[job.pk]))
    assert response.status_code == 200 and not response.context["input_bound"].flagged
    assert 'data-testid="input-bound"' not in response.content.decode()


def test_a_gpu_waiting_alone_is_weighed_with_the_others(client, lead_a, team_a, small_cluster):
    """A job's minute is its GPUs' mean: one GPU of four swinging does not make the job swing."""
    gpus = h200_gpus()[:4]
    job = make_job(team_a, "one-of-four", start=START, minutes=120, gpus=gpus)
    rollups(gpus[:1], START, SWINGING)
    rollups(gpus[1:], START, STEADY)
    client.force_login(lead_a)
    response = client.get(reverse("cluster:job-detail", args=[job.pk]))
    assert response.status_code == 200 and not response.context["input_bound"].flagged
    assert response.context["input_bound"].measured_minutes == 120


def test_the_ranking_marks_its_job_rows_in_one_query(team_a, small_cluster, django_assert_num_queries):
    gpus = h200_gpus()
    swinging = make_job(team_a, "swing", start=START, minutes=120, gpus=gpus[:2])
    steady = make_job(team_a, "steady", start=START, minutes=120, gpus=gpus[2:4])
    unmeasured = make_job(team_a, "dark", start=START, minutes=120, gpus=[Gpu.objects.get(uuid="GPU-l40s-a-0")])
    rollups(gpus[:2], START, SWINGING)
    rollups(gpus[2:4], START, STEADY)
    booking = IdleRow(kind="booking", object_id=7, label="#7", team="Alpha", project="", user="", gpus=None, holders=1,
                      idle_card_hours=Decimal(0), allocated_card_hours=Decimal(1), idle_share=None, idle_cost=None,
                      idle_ticks=0)
    rows = [row_of(swinging), row_of(steady), row_of(unmeasured), booking]
    with django_assert_num_queries(1):
        mark_input_bound(rows, DAY, DAY)
    assert rows[0].input_bound.flagged and rows[0].input_bound.dips == 19
    assert not rows[1].input_bound.flagged and rows[1].input_bound.measured_minutes == 120
    assert rows[2].input_bound is None and booking.input_bound is None
    with django_assert_num_queries(0):
        mark_input_bound([booking], DAY, DAY)


def test_the_ranking_reads_only_the_period_and_the_minutes_the_job_held(team_a, small_cluster):
    gpus = h200_gpus()[:1]
    job = make_job(team_a, "late", start=START + 60 * MINUTE, minutes=60, gpus=gpus)
    rollups(gpus, START, SWINGING)  # the first hour's swings were another holder's, before the job started
    rows = [row_of(job)]
    mark_input_bound(rows, DAY, DAY)
    assert rows[0].input_bound.measured_minutes == 60
    mark_input_bound(rows, date(2026, 11, 5), date(2026, 11, 5))
    assert rows[0].input_bound is None


def test_the_ranking_row_shows_the_hint(team_a, small_cluster):
    gpus = h200_gpus()[:2]
    job = make_job(team_a, "swing", start=START, minutes=120, gpus=gpus)
    rollups(gpus, START, SWINGING)
    row = mark_input_bound([row_of(job)], DAY, DAY)[0]
    html = render_to_string("boards/_idle_row.html", {"row": row, "rank": 1, "sees_costs": False})
    assert 'data-testid="input-bound-badge"' in html and "likely waiting on data or checkpoints" in html
    assert "32 % in dips" in html and "31.7 % of 120 measured minutes in 19 short dips" in html
    row.input_bound = None
    assert "input-bound-badge" not in render_to_string("boards/_idle_row.html", {"row": row, "rank": 1})


def test_the_ranking_reads_a_jobs_first_gpus_only(settings, team_a, small_cluster):
    """The rankings read at most CARDHOUR_INPUT_BOUND_SAMPLE_GPUS of a job's GPUs (the first by id), so a
    job of hundreds of GPUs costs what one of a node does."""
    from cluster.jobs.selectors import jobs_minute_utilization

    gpus = sorted(h200_gpus(), key=lambda gpu: gpu.pk)
    job = make_job(team_a, "wide", start=START, minutes=120, gpus=gpus)
    rollups(gpus[:2], START, SWINGING)
    rollups(gpus[2:], START, STEADY)
    end = START + 120 * MINUTE
    settings.CARDHOUR_INPUT_BOUND_SAMPLE_GPUS = 2
    assert jobs_minute_utilization([job.pk], START, end)[job.pk] == SWINGING  # the two swinging GPUs alone
    settings.CARDHOUR_INPUT_BOUND_SAMPLE_GPUS = 4
    assert jobs_minute_utilization([job.pk], START, end)[job.pk] == pytest.approx(
        [(a + b) / 2 for a, b in zip(SWINGING, STEADY, strict=True)])  # all four, weighed alike
