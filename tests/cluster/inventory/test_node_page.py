"""The node page's telemetry: a business day's GPU × time heatmaps, the agent's health, status history and alerts."""

from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from cluster.choices import AlertKind, AlertSubject, AlertTier, NodeStatus
from cluster.models import Alert, CollectionState, Gpu, MinuteRollup, Node, NodeStatusPeriod
from cluster.telemetry import charts
from cluster.telemetry.selectors import node_day_series, node_health
from core.timeutils import business_day_bounds, business_today, epoch_ms
from tests.conftest import T0

pytestmark = pytest.mark.django_db

DAY = "2026-11-02"  # T0's date
MINUTE = timedelta(minutes=1)
# session, user, nav (groups, memberships), unread notifications, node + GPUs + MIG, the GPUs' holders and
# utilization now (the viewer's teams, allocations, holds, rollups), series, health (3), the day's GPU % and SM
# activity per GPU (issue 16)
PAGE_QUERIES = 17


@pytest.fixture(autouse=True)
def frozen_clock():
    """The page draws a day only up to now: T0's day is in the past here, whatever the real date."""
    with time_machine.travel(T0 + timedelta(days=30), tick=False):
        yield


def node_url(hostname="h200-a", **query):
    url = reverse("cluster:node-detail", args=[hostname])
    return url + ("?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else "")


def rollups(gpus, start, minutes, *, util=40.0, covered_s=60):
    MinuteRollup.objects.bulk_create(
        MinuteRollup(
            gpu=gpu, bucket=start + m * MINUTE, covered_s=covered_s, util_covered_s=covered_s, sample_count=6,
            util_mean=util + gpu.index, util_max=util + 20, mem_used_max_mib=1024 * (gpu.index + 1),
        )
        for gpu in gpus for m in range(minutes)
    )


def heatmap(response, name="utilization_chart"):
    (trace,) = response.context[name]["data"]
    assert trace["type"] == "heatmap" and trace["meta"]["role"] == charts.HEATMAP
    return trace


@pytest.fixture
def node(small_cluster):
    return Node.objects.get(hostname="h200-a")


@pytest.fixture
def mig(node):
    parent = Gpu.objects.get(uuid="GPU-h200-a-1")
    return [
        Gpu.objects.create(
            node=node, index=1, uuid=f"MIG-{slot}", model=parent.model, memory_mib=9856, mig_parent=parent,
            mig_profile="1g.10gb", share=120000,
        )
        for slot in (1, 2)
    ]


@pytest.fixture
def sick_node(node, small_cluster):
    """h200-a with a collection history: an outage, counters, rejected records and alerts."""
    CollectionState.objects.create(
        node=node, spool_id="s1", cursor=99, last_attempt_at=T0 + timedelta(hours=12, seconds=5),
        last_success_at=T0 + timedelta(hours=11), data_complete_to=T0 + timedelta(hours=12, seconds=30),
        lag_s=42.46, clock_skew_s=-1.25, consecutive_failures=2, last_error="connection refused by gpu agent",
        records_stored=123456, records_rejected=7, rejected_by_reason={"ts: too far in the future": 2, "gpu_uuid: unknown GPU": 5},
        agent_dropped_total=1234, agent_version="0.3.1", driver_version="550.54.15",
    )
    NodeStatusPeriod.objects.create(node=node, status=NodeStatus.UP, started_at=T0, ended_at=T0 + timedelta(hours=3))
    NodeStatusPeriod.objects.create(
        node=node, status=NodeStatus.UNREACHABLE, started_at=T0 + timedelta(hours=3),
        ended_at=T0 + timedelta(hours=4), reason="3 failed fetches",
    )
    NodeStatusPeriod.objects.create(node=node, status=NodeStatus.UP, started_at=T0 + timedelta(hours=4))
    common = {"subject_type": AlertSubject.NODE, "subject_label": "x", "opened_at": T0, "last_seen_at": T0}
    Alert.objects.create(
        subject_id=node.pk, kind=AlertKind.GPU_XID, tier=AlertTier.WARNING, message="XID 79 on GPU 1", **common
    )
    Alert.objects.create(
        subject_id=node.pk, kind=AlertKind.NODE_UNREACHABLE, tier=AlertTier.CRITICAL,
        message="Agent unreachable for 3 fetches", **common,
    )
    Alert.objects.create(
        subject_id=node.pk, kind=AlertKind.AGENT_ERROR, tier=AlertTier.CRITICAL, message="closed one",
        closed_at=T0 + MINUTE, **common,
    )
    other = small_cluster["nodes"][1]
    Alert.objects.create(
        subject_id=other.pk, kind=AlertKind.NODE_UNREACHABLE, tier=AlertTier.CRITICAL, message="other node", **common
    )
    return node


def test_it_shows_the_agents_health_figures(client, engineer_a, sick_node):
    client.force_login(engineer_a)
    response = client.get(node_url(day=DAY))
    assert response.status_code == 200
    body = response.content.decode()
    for text in [
        "2026-11-02 12:00:05",  # last collection, in the display zone (UTC here)
        "2026-11-02 11:00:00",  # last success
        "2026-11-02 12:00:30",  # data complete to
        "42.5 s", "-1.25 s",  # lag and skew in seconds
        "connection refused by gpu agent", "123,456", "1,234", "0.3.1", "550.54.15",
    ]:
        assert text in body, text
    health = response.context["health"]
    assert health.rejected_total == 7
    assert health.rejected_by_reason == [("gpu_uuid: unknown GPU", 5), ("ts: too far in the future", 2)]
    assert "<code>gpu_uuid: unknown GPU</code></td><td class=\"num\">5</td>" in body


def test_it_shows_the_status_history_newest_first_with_coloured_badges(client, engineer_a, sick_node):
    client.force_login(engineer_a)
    response = client.get(node_url(day=DAY))
    history = response.context["health"].status_history
    assert [p.status for p in history] == ["up", "unreachable", "up"]
    body = response.content.decode()
    table = body[body.index('data-testid="status-history"'):]
    assert table.index('badge badge-green">Up') < table.index('badge badge-red">Unreachable')
    assert "3 failed fetches" in table
    assert "2026-11-02 03:00:00" in table and ">now<" in table


def test_it_shows_open_alerts_about_the_node_as_a_banner(client, engineer_a, sick_node):
    client.force_login(engineer_a)
    response = client.get(node_url(day=DAY))
    assert [a.kind for a in response.context["health"].open_alerts] == ["node_unreachable", "gpu_xid"]
    body = response.content.decode()
    banner = body[body.index('data-testid="node-alerts"'):body.index("</ul>", body.index('data-testid="node-alerts"'))]
    assert "Agent unreachable for 3 fetches" in banner and "XID 79 on GPU 1" in banner
    assert 'class="alert-red"' in banner and 'badge badge-amber">Warning' in banner
    assert "closed one" not in body and "other node" not in body


def test_a_node_never_collected_says_so(client, engineer_a, node):
    client.force_login(engineer_a)
    response = client.get(node_url(day=DAY))
    body = response.content.decode()
    assert "The collector has not contacted this node" in body
    assert "No status changes recorded." in body
    assert 'data-testid="node-alerts"' not in body


def test_it_charts_every_gpu_and_mig_instance_for_the_day(client, engineer_a, node, mig):
    gpus = list(Gpu.objects.filter(node=node).order_by("pk"))
    rollups(gpus[:-1], T0, 90)  # the last MIG instance has no rollups: a row of "no data" all the same
    rollups(gpus, T0 - MINUTE, 1)  # the day before: not on the chart
    client.force_login(engineer_a)
    response = client.get(node_url(day=DAY))
    utilization = heatmap(response)
    assert utilization["y"] == ["GPU 0", "GPU 1", "GPU 1 · 1g.10gb", "GPU 1 · 1g.10gb (2)"]
    assert utilization["x"][0] == "2026-11-02 00:05:00" and len(utilization["x"]) == 144
    assert utilization["z"][1][:10] == [41.0] * 9 + [None]  # GPU 1: 40 % + its index, 90 minutes
    assert utilization["z"][3] == [None] * 144
    memory = heatmap(response, "memory_chart")
    assert memory["z"][1][0] == 2.0
    assert memory["zmax"] == 140.4  # an H200's memory
    body = response.content.decode()
    assert '<script id="chart-utilization" type="application/json">' in body
    assert 'data-chart="chart-memory"' in body
    assert "/static/vendor/plotly/plotly.min.js" in body and "/static/js/charts.js" in body


def test_a_day_without_rollups_is_an_empty_chart_that_says_so(client, engineer_a, node):
    client.force_login(engineer_a)
    response = client.get(node_url(day=DAY))
    figure = response.context["utilization_chart"]
    assert figure["data"] == []
    assert figure["layout"]["annotations"][0]["text"] == "No samples for this day"


def test_minutes_after_the_data_complete_edge_are_still_filling(client, engineer_a, sick_node):
    gpu = Gpu.objects.get(uuid="GPU-h200-a-0")
    rollups([gpu], T0 + timedelta(hours=11, minutes=48), 13)  # 11:48 to 12:00; complete to 12:00:30
    client.force_login(engineer_a)
    response = client.get(node_url(day=DAY))
    figure = response.context["utilization_chart"]
    text = heatmap(response)["text"][0]
    assert not text[71].endswith("still filling")  # 11:50–12:00 is complete
    assert text[72] == "12:00–12:10 40.0 % (1/10 min measured) still filling"  # holds 12:00, the filling minute
    (band,) = figure["layout"]["shapes"]
    assert (band["x0"], band["x1"]) == ("2026-11-02 12:00:00", "2026-11-03 00:00:00")


def test_the_day_is_a_date_in_the_business_zone(client, engineer_a, node, settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "Asia/Shanghai"
    gpu = Gpu.objects.get(uuid="GPU-h200-a-0")
    shanghai_midnight = datetime(2026, 11, 1, 16, 0, tzinfo=UTC)
    rollups([gpu], shanghai_midnight - MINUTE, 2)  # 15:59 (the day before) and 16:00
    rollups([gpu], shanghai_midnight + timedelta(hours=24) - MINUTE, 2)  # 15:59 (this day) and 16:00 (next)
    client.force_login(engineer_a)
    response = client.get(node_url(day=DAY))
    assert response.context["day"] == date(2026, 11, 2)
    assert response.context["day_start"] == shanghai_midnight
    assert response.context["day_end"] == datetime(2026, 11, 2, 16, 0, tzinfo=UTC)
    trace = heatmap(response)
    measured = [c for c, value in enumerate(trace["z"][0]) if value is not None]
    assert measured == [0, 143]  # 00:00–00:10 and 23:50–24:00 in Shanghai, nothing of the days around
    assert trace["text"][0][0].startswith("16:00–16:10 40.0 % (1/10")  # drawn in the display zone (UTC here)
    assert "2026-11-02 in the business time zone Asia/Shanghai" in response.content.decode()


def test_a_business_day_spans_a_daylight_saving_change(settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "Europe/Berlin"
    start, end = business_day_bounds(date(2026, 10, 25))  # clocks go back: a 25-hour day
    assert start == datetime(2026, 10, 24, 22, 0, tzinfo=UTC)
    assert end - start == timedelta(hours=25)


def test_today_is_the_default_day_in_the_business_zone(client, engineer_a, node, settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "Asia/Shanghai"
    client.force_login(engineer_a)
    response = client.get(node_url())
    assert response.context["day"] == business_today()
    assert response.context["next_day"] is None
    body = response.content.decode()
    assert 'rel="next"' not in body
    assert f'name="day" value="{business_today():%Y-%m-%d}"' in body
    assert not response.context["form"].errors


def test_it_links_the_previous_and_next_days(client, engineer_a, node):
    client.force_login(engineer_a)
    body = client.get(node_url(day=DAY)).content.decode()
    assert 'rel="prev" href="?day=2026-11-01"' in body
    assert 'rel="next" href="?day=2026-11-03"' in body
    assert 'value="2026-11-02"' in body


@pytest.mark.parametrize("bad", ["2026-13-45", "yesterday", "02/11/2026", "9999-12-31", "0001-01-01"])
def test_a_bad_day_names_the_parameter_and_the_rule_and_shows_today(client, engineer_a, node, bad):
    client.force_login(engineer_a)
    response = client.get(node_url(day=bad))
    assert response.status_code == 200
    assert response.context["day"] == business_today()
    body = response.content.decode()
    assert "The “day” parameter must be a date written YYYY-MM-DD, for example 2026-11-02." in body
    assert "Showing today instead." in body


def test_the_series_is_one_query_of_tidy_rows(node, mig, django_assert_num_queries):
    gpus = list(Gpu.objects.filter(node=node))
    rollups(gpus, T0, 3, covered_s=30)
    rollups([Gpu.objects.get(uuid="GPU-h200-b-0")], T0, 3)  # another node's: left out
    start, end = business_day_bounds(date(2026, 11, 2))
    with django_assert_num_queries(1):
        df = node_day_series(node, start, end)
    assert list(df.columns) == ["gpu", "bucket_ms", "util_mean", "util_max", "mem_used_max_mib", "coverage"]
    assert len(df) == 4 * 3
    assert df["bucket_ms"].tolist()[:3] == [epoch_ms(T0 + m * MINUTE) for m in range(3)]
    assert set(df["coverage"]) == {0.5}
    assert df["gpu"].unique().tolist() == ["GPU 0", "GPU 1", "GPU 1 · 1g.10gb", "GPU 1 · 1g.10gb (2)"]


def test_node_health_is_three_queries(sick_node, django_assert_num_queries):
    with django_assert_num_queries(3):
        health = node_health(sick_node)
    assert health.collected and health.consecutive_failures == 2 and len(health.status_history) == 3


def page_queries(client, hostname):
    with CaptureQueriesContext(connection) as queries:
        assert client.get(node_url(hostname, day=DAY)).status_code == 200
    return len(queries)


def test_the_page_query_count_is_pinned_and_does_not_grow_with_gpus(
    client, engineer_a, sick_node, mig, small_cluster, django_assert_num_queries
):
    rollups(list(Gpu.objects.filter(node=sick_node)), T0, 1440)  # 4 GPUs × a whole day
    big = Node.objects.create(hostname="big-node", pool="train")
    model = small_cluster["h200"]
    big_gpus = [
        Gpu.objects.create(node=big, index=i, uuid=f"GPU-big-{i}", model=model, memory_mib=model.memory_mib)
        for i in range(8)
    ]
    rollups(big_gpus, T0, 1440)
    client.force_login(engineer_a)
    client.get(node_url(day=DAY))  # warm the session
    with django_assert_num_queries(PAGE_QUERIES):
        response = client.get(node_url(day=DAY))
    assert response.status_code == 200 and 'data-testid="utilization-chart"' in response.content.decode()
    assert len(heatmap(response)["y"]) == 4
    big_count, small_count = page_queries(client, "big-node"), page_queries(client, "h200-a")
    assert big_count == small_count
