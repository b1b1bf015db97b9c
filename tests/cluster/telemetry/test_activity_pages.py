"""GPU %, SM activity and occupancy side by side (issue 16): the job page and the node page read the minute
rollups' GPM means, weighted by the seconds they cover, and say "no SM data" where a GPU has none, never 0 %."""

from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.urls import reverse

from cluster.jobs.services import JobInput, job_upsert
from cluster.models import Gpu, JobSource, JobState, MinuteRollup
from cluster.telemetry.selectors import gpu_activity, mean_activity
from tests.conftest import T0

pytestmark = pytest.mark.django_db

MINUTE = timedelta(minutes=1)


@pytest.fixture(autouse=True)
def frozen_clock():
    with time_machine.travel(T0 + timedelta(days=2), tick=False):
        yield


def minutes(gpu, start, count, *, util, sm=None, occupancy=None, gpm_covered_s=60):
    MinuteRollup.objects.bulk_create(
        MinuteRollup(gpu=gpu, bucket=start + m * MINUTE, covered_s=60, util_covered_s=60, sample_count=6,
                     util_mean=util, util_max=util, mem_used_max_mib=2048, sm_active_mean=sm,
                     sm_occupancy_mean=occupancy, tensor_active_mean=None if sm is None else sm / 2,
                     dram_active_mean=None if sm is None else 10.0,
                     gpm_covered_s=gpm_covered_s if sm is not None else 0)
        for m in range(count)
    )


def job_on(team, gpus, *, external_id="7001", start=T0, length=60):
    job, _ = job_upsert(JobInput(
        source=JobSource.SLURM, external_id=external_id, start_time=start, team=team, user="ann",
        state=JobState.COMPLETED, submit_time=start - MINUTE, end_time=start + length * MINUTE, gpus=gpus,
        gpu_count=Decimal(len(gpus)),
    ))
    return job


def kpi(body: str, name: str) -> str:
    part = body[body.index(f'data-kpi="{name}"'):]
    return part[:part.index("</div>")]


def activity_row(body: str, label: str) -> str:
    part = body[body.index(f'data-gpu-activity="{label}"'):]
    return part[:part.index("</tr>")]


def test_the_means_are_weighted_by_the_seconds_each_minute_covers(small_cluster):
    gpu = Gpu.objects.get(node__hostname="h200-a", index=0)
    minutes(gpu, T0, 1, util=90.0, sm=60.0, occupancy=30.0, gpm_covered_s=60)
    minutes(gpu, T0 + MINUTE, 1, util=90.0, sm=20.0, occupancy=10.0, gpm_covered_s=20)
    (activity,) = gpu_activity([gpu.pk], T0, T0 + 2 * MINUTE).values()
    assert activity.sm_active_pct == pytest.approx((60 * 60 + 20 * 20) / 80)  # 50, not the plain mean 40
    assert activity.sm_occupancy_pct == pytest.approx((30 * 60 + 10 * 20) / 80)
    assert activity.util_pct == pytest.approx(90.0)
    assert (activity.measured_minutes, activity.sm_minutes) == (2, 2)


def test_a_gpu_without_gpm_has_no_sm_data_not_zero(small_cluster):
    l40s = Gpu.objects.get(node__hostname="l40s-a", index=0)
    minutes(l40s, T0, 3, util=70.0)
    (activity,) = gpu_activity([l40s.pk], T0, T0 + 3 * MINUTE).values()
    assert activity.no_sm_data and activity.sm_active_pct is None and activity.util_pct == pytest.approx(70.0)


def test_a_jobs_activity_weights_each_gpu_by_its_measured_minutes_and_share(small_cluster):
    gpus = list(Gpu.objects.filter(node__hostname="h200-a").order_by("index"))
    minutes(gpus[0], T0, 30, util=90.0, sm=60.0, occupancy=30.0)
    minutes(gpus[1], T0, 10, util=50.0, sm=20.0, occupancy=10.0)
    per_gpu = gpu_activity([g.pk for g in gpus], T0, T0 + 60 * MINUTE)
    job = mean_activity(per_gpu.values(), {gpus[0].pk: 1.0, gpus[1].pk: 0.5})
    assert job.sm_active_pct == pytest.approx((60 * 30 + 20 * 5) / 35)
    assert job.util_pct == pytest.approx((90 * 30 + 50 * 5) / 35)
    assert mean_activity([]) is None


def test_the_job_page_shows_gpu_percent_sm_activity_and_occupancy_side_by_side(client, lead_a, team_a,
                                                                              small_cluster):
    gpus = list(Gpu.objects.filter(node__hostname="h200-a").order_by("index"))
    minutes(gpus[0], T0, 60, util=92.0, sm=64.0, occupancy=36.0)
    minutes(gpus[1], T0, 60, util=88.0, sm=56.0, occupancy=30.0)
    job = job_on(team_a, gpus)
    client.force_login(lead_a)
    response = client.get(reverse("cluster:job-detail", args=[job.pk]))
    assert response.status_code == 200
    body = response.content.decode()
    assert "90.0 %" in kpi(body, "gpu-pct")
    assert "60.0 %" in kpi(body, "sm-active")
    assert "33.0 %" in kpi(body, "sm-occupancy")
    row = activity_row(body, "h200-a · GPU 0")
    assert "92.0 %" in row and "64.0 %" in row and "36.0 %" in row and "no SM data" not in row


def test_the_job_page_says_no_sm_data_on_a_gpu_without_gpm(client, lead_a, team_a, small_cluster):
    l40s = list(Gpu.objects.filter(node__hostname="l40s-a").order_by("index"))
    minutes(l40s[0], T0, 60, util=75.0)
    job = job_on(team_a, l40s[:1], external_id="7002")
    client.force_login(lead_a)
    body = client.get(reverse("cluster:job-detail", args=[job.pk])).content.decode()
    assert "75.0 %" in kpi(body, "gpu-pct")
    assert "no SM data" in kpi(body, "sm-active") and "0.0 %" not in kpi(body, "sm-active")
    assert "no SM data" in activity_row(body, "l40s-a · GPU 0")


def test_the_node_page_shows_the_days_sm_activity_per_gpu(client, admin_user, small_cluster):
    gpus = list(Gpu.objects.filter(node__hostname="h200-a").order_by("index"))
    minutes(gpus[0], T0, 30, util=80.0, sm=48.0, occupancy=24.0)
    minutes(gpus[1], T0, 30, util=40.0)  # a driver without GPM on this one
    client.force_login(admin_user)
    response = client.get(reverse("cluster:node-detail", args=["h200-a"]), {"day": T0.date().isoformat()})
    assert response.status_code == 200
    body = response.content.decode()
    table = body[body.index('data-testid="node-activity"'):]
    rows = {label: activity for label, activity in response.context["activity_rows"]}
    assert len(rows) == 2
    first, second = (table[table.index(f'data-gpu-activity="{label}"'):] for label in rows)
    assert "80.0 %" in first[:first.index("</tr>")] and "48.0 %" in first[:first.index("</tr>")]
    assert "40.0 %" in second[:second.index("</tr>")] and "no SM data" in second[:second.index("</tr>")]
