"""Pending work in the usage report (issue 12): the selector, the API (JSON and downloads) and the command agree
on how many rollup buckets and usage marks over the window the worker has not done; finishing an import does
them, with progress bars when asked; GPU model aliases on the admin site."""

import io
from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.core.management import call_command

from accounting.models import UsageDirty
from accounting.usage.replay import pending_counts, replay_finish
from accounting.usage.report import pending_buckets, usage_report
from cluster.models import DirtyBucket, GpuModelAlias

pytestmark = [pytest.mark.django_db, pytest.mark.clock]

T = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
NOW = datetime(2026, 11, 5, 12, 0, tzinfo=UTC)
URL = "/api/v1/reports/usage/"
WINDOW = {"start": "2026-11-02T00:00:00Z", "end": "2026-11-03T00:00:00Z"}


@pytest.fixture(autouse=True)
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def pending(small_cluster):
    """Two dirty minutes and one dirty hour of a GPU on 2 November, a usage mark on 1–2 November and one
    on 4 November (outside the window)."""
    gpu = small_cluster["nodes"][0].gpus.first()
    DirtyBucket.objects.bulk_create([
        DirtyBucket(level="minute", gpu=gpu, bucket=T + timedelta(minutes=5)),
        DirtyBucket(level="minute", gpu=gpu, bucket=T + timedelta(minutes=6)),
        DirtyBucket(level="hour", gpu=gpu, bucket=T),
    ])
    UsageDirty.objects.create(gpu_id=gpu.pk, lo=T - timedelta(days=1, hours=2), hi=T - timedelta(hours=1))
    UsageDirty.objects.create(gpu_id=gpu.pk, lo=T + timedelta(days=2), hi=T + timedelta(days=2, hours=1))
    return gpu


def test_the_selector_counts_the_work_that_overlaps_the_window(pending):
    start, end = datetime(2026, 11, 2, tzinfo=UTC), datetime(2026, 11, 3, tzinfo=UTC)
    assert pending_buckets(start=start, end=end) == (4, start)  # the mark from 1 November starts before the window
    assert pending_buckets(start=T + timedelta(minutes=6), end=end) == (2, T + timedelta(minutes=6))
    assert pending_buckets(start=T + timedelta(hours=1), end=end) == (0, None)
    report = usage_report(start=start, end=end, by="team", now=NOW)
    assert (report.pending_buckets, report.pending_from) == (4, start)
    assert pending_counts() == {"minute_buckets": 2, "hour_buckets": 1, "usage_marks": 2}


def test_an_open_usage_mark_is_pending_in_every_window_after_its_start(pending):
    """A running job's mark has no end (the triggers leave it to the application's clock)."""
    UsageDirty.objects.create(gpu_id=pending.pk, lo=T + timedelta(hours=3), hi=None)
    start, end = datetime(2026, 11, 2, 12, tzinfo=UTC), datetime(2026, 11, 10, tzinfo=UTC)
    assert pending_buckets(start=start, end=end) == (2, start)  # the open mark and the mark of 4 November


def test_the_api_gives_pending_work_in_json_and_on_downloads(api, finance_user, pending):
    client = api.as_user(finance_user)
    body = client.get(URL, WINDOW).json()
    assert (body["pending_buckets"], body["pending_from"]) == (4, "2026-11-02T00:00:00+00:00")
    response = client.get(URL, {**WINDOW, "format": "csv"})
    assert response.status_code == 200 and response["X-Cardhour-Pending-Buckets"] == "4"


def test_the_command_warns_and_agrees_with_the_api(pending):
    out, err = io.StringIO(), io.StringIO()
    call_command("usage_report", "--start", WINDOW["start"], "--end", WINDOW["end"], "--format", "json",
                 stdout=out, stderr=err)
    assert '"pending_buckets": 4' in out.getvalue()
    assert "Warning: 4 buckets pending: figures after 2026-11-02T00:00:00+00:00 may change" in err.getvalue()


def test_finishing_does_the_work_and_draws_progress_bars_when_given_a_stream(pending):
    bars = io.StringIO()
    done = replay_finish(now=NOW, progress=bars)
    assert (done.minute_buckets, done.hour_buckets, done.usage_marks) == (2, 1, 2)
    assert "minute rollups" in bars.getvalue() and "daily aggregates" in bars.getvalue()
    assert pending_counts() == {"minute_buckets": 0, "hour_buckets": 0, "usage_marks": 0}
    assert pending_buckets(start=T - timedelta(days=3), end=NOW) == (0, None)


def test_gpu_model_aliases_are_on_the_admin_site(client, admin_user, small_cluster):
    admin_user.is_staff = admin_user.is_superuser = True
    admin_user.save()
    client.force_login(admin_user)
    response = client.post("/admin/cluster/gpumodelalias/add/", {"alias": "H200_141", "model": small_cluster["h200"].pk})
    assert response.status_code == 302
    assert GpuModelAlias.objects.get().alias == "h200_141"  # stored lower case
    page = client.get("/admin/cluster/gpumodelalias/", {"q": "h200"})
    assert page.status_code == 200 and b"h200_141" in page.content and b"NVIDIA H200" in page.content
    page = client.get(f"/admin/cluster/gpumodel/{small_cluster['h200'].pk}/change/")
    assert page.status_code == 200 and b"h200_141" in page.content
