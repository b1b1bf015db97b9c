"""What an engineer sees on a node page: who holds each GPU now, today's GPU × time heatmaps drawn by the local
plotly bundle, and the agent's health."""

from datetime import timedelta
from urllib.parse import urlsplit

from playwright.sync_api import expect

from cluster.choices import AlertKind, AlertSubject, AlertTier, NodeStatus
from cluster.models import (
    Alert,
    Allocation,
    CollectionState,
    Gpu,
    Job,
    JobSource,
    JobState,
    MinuteRollup,
    Node,
    NodeStatusPeriod,
)
from core.timeutils import business_day_bounds, business_today
from tests.browser.conftest import NOW

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


def todays_telemetry(node, gpus, *, now):
    """Up to three hours of minute rollups ending at the current, still-filling minute."""
    day_start, _end = business_day_bounds(business_today(now=now))
    current = now.replace(second=0, microsecond=0)
    first = max(day_start, current - timedelta(hours=3))
    minutes = int((current - first).total_seconds() // 60) + 1
    MinuteRollup.objects.bulk_create(
        MinuteRollup(
            gpu=gpu, bucket=first + timedelta(minutes=m), covered_s=60 if m % 37 else 30,
            util_covered_s=60 if m % 37 else 30, sample_count=6, util_mean=(20 * gpu.index + m) % 100,
            util_max=min(100, (20 * gpu.index + m) % 100 + 10), mem_used_max_mib=4096 * (gpu.index + 1) + 16 * m,
        )
        for gpu in gpus for m in range(minutes)
        if not 40 <= m < 45  # a five-minute gap in every line
    )
    CollectionState.objects.create(
        node=node, spool_id="s1", cursor=10, last_attempt_at=now, last_success_at=now,
        data_complete_to=now - timedelta(seconds=20), lag_s=20.0, clock_skew_s=0.42, records_stored=5400,
        agent_version="0.3.1", driver_version="550.54.15", rejected_by_reason={"ts: too far in the future": 3},
        records_rejected=3,
    )
    NodeStatusPeriod.objects.create(
        node=node, status=NodeStatus.UNREACHABLE, started_at=now - timedelta(hours=5),
        ended_at=now - timedelta(hours=4), reason="3 failed fetches",
    )
    NodeStatusPeriod.objects.create(node=node, status=NodeStatus.UP, started_at=now - timedelta(hours=4))
    Alert.objects.create(
        subject_type=AlertSubject.NODE, subject_id=node.pk, subject_label=node.hostname, kind=AlertKind.GPU_XID,
        tier=AlertTier.WARNING, message="XID 79 on GPU 1", opened_at=now - timedelta(minutes=30), last_seen_at=now,
    )


def rows_top_down(chart):
    """The heatmap's row labels as drawn, top first (plotly's DOM order is its own)."""
    labels = chart.locator(".ytick text").evaluate_all(
        "els => els.map(e => [e.getBoundingClientRect().top, e.textContent])"
    )
    return [text for _top, text in sorted(labels)]


def console_error(message, problems):
    """Console errors, but the browser's own favicon probe (the site has no favicon, not ours to add)."""
    if message.type == "error" and not message.location.get("url", "").endswith("/favicon.ico"):
        problems.append(message.text)


def test_an_engineer_sees_todays_charts_and_the_agents_health(
    page, live_server, login, screenshot, engineer_a, team_a, small_cluster
):
    node = Node.objects.get(hostname="h200-a")
    parent = Gpu.objects.get(uuid="GPU-h200-a-1")
    Gpu.objects.create(
        node=node, index=1, uuid="MIG-h200-a-1-0", model=parent.model, memory_mib=20096, mig_parent=parent,
        mig_profile="2g.20gb", share=240000,
    )
    gpus = list(Gpu.objects.filter(node=node))
    now = NOW  # the moment the browser tests are frozen at (conftest)
    todays_telemetry(node, gpus, now=now)
    running = Job.objects.create(source=JobSource.SLURM, external_id="7", name="notebook", user="ed", team=team_a,
                                 state=JobState.RUNNING, start_time=now - timedelta(hours=1))
    Allocation.objects.create(job=running, gpu=gpus[0], share=gpus[0].share, start=running.start_time)
    requests, problems = [], []
    page.on("request", lambda request: requests.append(request.url))
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda message: console_error(message, problems))

    login(page, live_server, engineer_a.username)
    page.goto(f"{live_server.url}/inventory/nodes/h200-a/")

    for testid in ("utilization-chart", "memory-chart"):
        chart = page.get_by_test_id(testid)
        expect(chart).to_have_class("chart heatmap js-plotly-plot")
        # One heatmap (an image of cells), a row per GPU and MIG instance: not a line per GPU.
        expect(chart.locator("g.hm image")).to_have_count(1)
        expect(chart.locator("path.js-line")).to_have_count(0)
        expect(chart.locator(".ytick text")).to_have_count(3)
        assert rows_top_down(chart) == ["GPU 0", "GPU 1", "GPU 1 · 2g.20gb"]
        expect(chart.locator(".annotation-text")).to_have_text(["still filling"])
        expect(chart.locator(".xtick text").first).to_have_text("00:00")  # the day from midnight, in the display zone
    expect(page.get_by_test_id("utilization-chart").locator(".gtitle")).to_have_text(
        "How busy was each GPU? Mean utilization per 10 minutes"
    )
    expect(page.get_by_test_id("heatmap-key")).to_contain_text("Grey: no measurement")

    gpu_rows = page.get_by_test_id("node-gpus").locator("tbody tr")
    expect(gpu_rows).to_have_count(3)
    expect(gpu_rows.nth(0)).to_contain_text("Team Alpha")
    expect(gpu_rows.nth(0).get_by_role("link", name="job 7 · notebook")).to_be_visible()
    expect(gpu_rows.nth(2)).to_contain_text("Free")  # the MIG instance, measured this minute at 0 %
    expect(gpu_rows.nth(2)).to_contain_text("0 %")

    health = page.get_by_test_id("node-health")
    expect(health.get_by_test_id("health-facts")).to_contain_text("20.0 s")
    expect(health.get_by_test_id("health-facts")).to_contain_text("0.42 s")
    expect(health.get_by_test_id("rejected-by-reason")).to_contain_text("ts: too far in the future")
    expect(health.get_by_test_id("status-history").locator(".badge")).to_have_text(["Up", "Unreachable"])
    expect(page.get_by_test_id("node-alerts")).to_contain_text("XID 79 on GPU 1")
    screenshot(page, "node-telemetry")

    assert not problems, problems
    assert any(url.endswith("/static/vendor/plotly/plotly.min.js") for url in requests)
    remote = [url for url in requests if urlsplit(url).scheme in {"http", "https", "ws", "wss"}
              and urlsplit(url).hostname not in LOCAL_HOSTS]
    assert not remote, remote


def test_the_previous_day_link_shows_an_empty_day(page, live_server, login, engineer_a, small_cluster):
    login(page, live_server, engineer_a.username)
    page.goto(f"{live_server.url}/inventory/nodes/h200-a/")
    expect(page.get_by_test_id("utilization-chart")).to_have_class("chart heatmap js-plotly-plot")

    page.get_by_role("link", name="‹ Previous day").click()

    yesterday = business_today() - timedelta(days=1)
    expect(page).to_have_url(f"{live_server.url}/inventory/nodes/h200-a/?day={yesterday:%Y-%m-%d}")
    expect(page.locator("input[name=day]")).to_have_value(f"{yesterday:%Y-%m-%d}")
    chart = page.get_by_test_id("utilization-chart")
    expect(chart.locator(".annotation-text")).to_have_text(["No samples for this day"])
    expect(page.get_by_role("link", name="Next day ›")).to_be_visible()
