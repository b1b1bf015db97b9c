"""What a lead and an engineer see of jobs: only their team's runs, and a run's KPIs and drawn chart."""

import math
from datetime import timedelta
from decimal import Decimal

import pytest
from playwright.sync_api import expect

from cluster.jobs.services import JobInput, job_upsert
from cluster.models import Gpu, JobSource, JobState, MinuteRollup
from teams.models import Project
from teams.roles import TeamRole
from tests.conftest import T0

MINUTE = timedelta(minutes=1)


def run(team, external_id, *, start, minutes, state=JobState.COMPLETED, gpus=None, gpu_count=Decimal(1), **extra):
    job, _ = job_upsert(JobInput(
        source=JobSource.SLURM, external_id=external_id, start_time=start, team=team, state=state,
        submit_time=start - 12 * MINUTE, end_time=start + minutes * MINUTE, gpus=gpus,
        gpu_count=Decimal(len(gpus)) if gpus else gpu_count, **extra,
    ))
    return job


@pytest.fixture
def teams_jobs(team_a, team_b, small_cluster):
    """Team A: a two-GPU training run on h200-a (preempted once, then resumed) with three hours of minute
    rollups, and an unplaced inference job; team B: two jobs of its own."""
    gpus = list(Gpu.objects.filter(node__hostname="h200-a").order_by("index"))
    project = Project.objects.get(slug="alpha-pre")
    common = {"user": "lena", "project": project, "name": "llm-pretrain-7b"}
    run(team_a, "5101", start=T0 - 60 * MINUTE, minutes=40, state=JobState.PREEMPTED, gpus=gpus, **common)
    resumed = run(team_a, "5101", start=T0, minutes=180, gpus=gpus, **common)
    run(team_a, "5102", start=T0 + 30 * MINUTE, minutes=90, user="ed", name="eval-sweep", gpu_count=Decimal("0.5"),
        gpu_model=small_cluster["l40s"])
    run(team_b, "6201", start=T0 + 10 * MINUTE, minutes=60, user="bea", name="vision-finetune")
    run(team_b, "6202", start=T0 + 20 * MINUTE, minutes=30, user="bea", name="beta-batch", state=JobState.FAILED)
    MinuteRollup.objects.bulk_create(
        MinuteRollup(
            gpu=gpu, bucket=T0 + m * MINUTE, covered_s=60, util_covered_s=60, sample_count=6,
            util_mean=2.0 if 100 <= m < 120 else round(55 + 35 * math.sin(m / 9 + gpu.index), 1),
            util_max=100, mem_used_max_mib=60000,
        )
        for gpu in gpus for m in range(180) if not 60 <= m < 65  # five minutes with no samples
    )
    return resumed


def test_a_lead_sees_their_teams_jobs_and_a_jobs_kpis_and_chart(page, live_server, login, screenshot, make_user,
                                                                  team_a, teams_jobs):
    lead = make_user("lara-lead-a", team=team_a, role=TeamRole.LEAD)
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))

    login(page, live_server, lead.username)
    page.locator("a[data-nav=jobs]").click()

    expect(page).to_have_url(f"{live_server.url}/jobs/")
    expect(page.locator("a[data-nav=jobs]")).to_have_attribute("aria-current", "page")
    rows = page.get_by_test_id("jobs").locator("tbody tr")
    expect(rows).to_have_count(3)  # 5101 twice (two runs) and 5102
    expect(page.get_by_test_id("jobs")).not_to_contain_text("Team Beta")
    expect(page.get_by_test_id("jobs")).not_to_contain_text("6201")
    screenshot(page, "jobs-lead")

    page.get_by_test_id("jobs").locator(f"tr[data-job='{teams_jobs.pk}'] a").first.click()

    expect(page).to_have_url(f"{live_server.url}/jobs/{teams_jobs.pk}/")
    kpis = page.get_by_test_id("job-kpis")
    expect(kpis.locator("[data-kpi=queue-wait] strong")).to_have_text("12 min 00 s")
    expect(kpis.locator("[data-kpi=run-time] strong")).to_have_text("3 h 00 min")
    # 2 GPUs × 3 h = 6 card-hours; 2 × 5 min unmeasured = 0.17; 2 × 20 min at 2 % idle = 0.67.
    expect(kpis.locator("[data-kpi=allocated] strong")).to_have_text("6.00")
    expect(kpis.locator("[data-kpi=unmeasured] strong")).to_have_text("0.17")
    expect(kpis.locator("[data-kpi=idle] strong")).to_have_text("0.67")
    expect(kpis.locator("[data-kpi=interruptions] strong")).to_have_text("1")
    expect(kpis.locator("[data-kpi=recovery] strong")).to_have_text("20 min 00 s")  # preempted −00:20, resumed 00:00
    chart = page.get_by_test_id("job-utilization-chart")
    expect(chart).to_have_class("chart js-plotly-plot")
    expect(chart.locator(".legendtext")).to_have_text(["h200-a · GPU 0", "h200-a · GPU 1"])
    expect(chart.locator(".annotation-text")).to_have_text(["idle below 5 %"])
    expect(page.get_by_test_id("job-allocations").locator("tbody tr")).to_have_count(2)
    expect(page.get_by_test_id("job-runs").locator("tbody tr")).to_have_count(2)
    screenshot(page, "job-detail")
    assert not problems, problems


def test_an_engineer_of_another_team_sees_only_theirs(page, live_server, login, make_user, team_b, teams_jobs):
    engineer = make_user("bert-eng-b", team=team_b, role=TeamRole.ENGINEER)

    login(page, live_server, engineer.username)
    page.goto(f"{live_server.url}/jobs/")

    table = page.get_by_test_id("jobs")
    expect(table.locator("tbody tr")).to_have_count(2)
    expect(table).to_contain_text("vision-finetune")
    expect(table).not_to_contain_text("Team Alpha")
    expect(table).not_to_contain_text("5101")
    response = page.goto(f"{live_server.url}/jobs/{teams_jobs.pk}/")
    assert response.status == 404
