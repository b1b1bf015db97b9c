"""The monthly resource profile and next month's need (issue 15, boards/periods/): peak and mean GPUs held
on a hand-made month, the page for every role, its CSV downloads, refused parameters and a query count that
does not grow with the cluster."""

import csv
import io
import json
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine

from accounting.models import DailyUnplacedUsage, DailyUsage, HourlyUsage
from accounting.usage.detail import write_model_sums
from boards.periods.profile import month_profile, next_month_need
from cluster.models import Gpu, GpuModel, Node
from core.units import TICKS_PER_CARD_HOUR

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 2, 1, 0, tzinfo=UTC)  # November is in progress; October is the last full month
OCTOBER = date(2026, 10, 1)
HOUR = TICKS_PER_CARD_HOUR
PEAK = datetime(2026, 10, 5, 10, tzinfo=UTC)


def make_gpus(count: int, model: GpuModel, prefix: str) -> list[Gpu]:
    node = Node.objects.create(hostname=f"{prefix}-node")
    return [Gpu.objects.create(node=node, index=i, uuid=f"{prefix}-{i}", model=model, memory_mib=1) for i in range(count)]


def store(rows: list[tuple]) -> None:
    """HourlyUsage rows (hour, gpu, state, team, ticks) and the DailyUsage they sum to."""
    HourlyUsage.objects.bulk_create([
        HourlyUsage(day=hour.date(), hour=hour, gpu=gpu, state=state, team=team, ticks=ticks)
        for hour, gpu, state, team, ticks in rows
    ])
    daily = Counter()
    for hour, gpu, state, team, ticks in rows:
        daily[(hour.date(), gpu, state, team)] += ticks
    DailyUsage.objects.bulk_create([DailyUsage(day=day, gpu=gpu, state=state, team=team, ticks=ticks)
                                    for (day, gpu, state, team), ticks in daily.items()])
    for day in {day for day, _gpu, _state, _team in daily}:
        write_model_sums(day=day)  # as aggregate_day does after writing a day's hourly usage


def hours_of(month: date):
    hour = datetime(month.year, month.month, 1, tzinfo=UTC)
    while hour.month == month.month:
        yield hour
        hour += timedelta(hours=1)


@pytest.fixture
def month(team_a, team_b):
    """October 2026: g0 (H200) busy for team A every hour; g1 (H200) unallocated but idle for team B in the
    peak hour; g2 (L40S) down but half held by team A (unmeasured) in the peak hour; 2 unplaced card-hours
    of team B on H200; and November's first hour, g0 busy for team A."""
    h200 = GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=1)
    l40s = GpuModel.objects.create(name="NVIDIA L40S", short_name="L40S", memory_mib=1)
    g0, g1 = make_gpus(2, h200, "h")
    (g2,) = make_gpus(1, l40s, "l")
    rows = []
    for hour in hours_of(OCTOBER):
        rows.append((hour, g0, "busy", team_a, HOUR))
        if hour == PEAK:
            rows += [(hour, g1, "idle", team_b, HOUR), (hour, g2, "unmeasured", team_a, HOUR // 2),
                     (hour, g2, "unallocated", None, HOUR // 2)]
        else:
            rows += [(hour, g1, "unallocated", None, HOUR), (hour, g2, "down", None, HOUR)]
    rows.append((datetime(2026, 11, 1, tzinfo=UTC), g0, "busy", team_a, HOUR))
    store(rows)
    DailyUnplacedUsage.objects.create(day=date(2026, 10, 6), team=team_b, gpu_model=h200, ticks=2 * HOUR)
    return {"h200": h200, "l40s": l40s, "gpus": [g0, g1, g2]}


def test_it_finds_the_peak_and_mean_gpus_held_per_model_team_and_cluster(month, team_a, team_b):
    profile = month_profile(OCTOBER, now=NOW)
    assert not profile.partial and profile.hours == Decimal("744.00")
    h200, l40s = profile.models
    assert (h200.name, h200.peak, h200.mean, h200.capacity) == ("H200", Decimal("2.00"), Decimal("1.00"), Decimal("2.00"))
    # placed 745 card-hours, plus 2 unplaced in the card-hours only
    assert (h200.allocated, h200.busy, h200.idle, h200.unmeasured) == (
        Decimal("747.0000"), Decimal("744.0000"), Decimal("1.0000"), Decimal("2.0000"))
    assert (l40s.peak, l40s.mean, l40s.capacity, l40s.unmeasured) == (
        Decimal("0.50"), Decimal("0.00"), Decimal("1.00"), Decimal("0.5000"))
    total = profile.total
    assert (total.peak, total.mean, total.capacity, total.allocated) == (
        Decimal("2.50"), Decimal("1.00"), Decimal("3.00"), Decimal("747.5000"))
    alpha, beta = profile.teams
    assert (alpha.name, alpha.peak, alpha.allocated, alpha.efficiency) == (
        "Team Alpha", Decimal("1.50"), Decimal("744.5000"), Decimal("99.9"))
    assert (beta.name, beta.peak, beta.mean, beta.allocated, beta.unmeasured, beta.efficiency) == (
        "Team Beta", Decimal("1.00"), Decimal("0.00"), Decimal("3.0000"), Decimal("2.0000"), Decimal("0.0"))
    assert profile.unplaced_card_hours == Decimal("2.0000")
    series = profile.series
    peak = series[series["hour"] == PEAK].set_index("model")
    assert peak.loc["H200", "held"] == 2 and peak.loc["H200", "capacity"] == 2 and peak.loc["L40S", "held"] == 0.5
    assert len(series) == 744 * 2 and not series["partial"].any()


def test_a_month_in_progress_counts_its_hours_so_far_and_is_partial(month):
    profile = month_profile(date(2026, 11, 1), now=NOW)
    assert profile.partial and profile.hours == Decimal("25.00")
    assert profile.total.peak == Decimal("1.00") and profile.total.mean == Decimal("0.04")


def test_one_full_month_is_not_enough_history_for_next_months_need(month):
    need = next_month_need(now=NOW)
    assert need.month == date(2026, 11, 1) and need.months == [OCTOBER]
    projection = need.total.projection
    assert not projection.enough_history and projection.months_used == 1
    assert projection.last_mean == Decimal("1.00") and need.total.capacity == Decimal("3.00")


def test_next_months_need_follows_the_trend_of_three_full_months(team_a):
    h200 = GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=1)
    (gpu,) = make_gpus(1, h200, "h")
    for month, held in ((date(2026, 8, 1), 1), (date(2026, 9, 1), 2), (date(2026, 10, 1), 3)):
        hours = len(list(hours_of(month)))
        first = datetime(month.year, month.month, 1, tzinfo=UTC)  # the month's ticks in its first hour's rows
        store([(first, gpu, "busy", team_a, held * hours * HOUR), (first, gpu, "unallocated", None, (5 - held) * hours * HOUR)])
    need = next_month_need(now=NOW)
    assert need.months == [date(2026, 8, 1), date(2026, 9, 1), date(2026, 10, 1)]
    for row in (need.total, *need.models, *need.teams):
        assert (row.projection.value, row.projection.low, row.projection.high) == (Decimal("4.00"),) * 3
        assert [mean for _m, mean in row.history] == [Decimal("1.00"), Decimal("2.00"), Decimal("3.00")]
    assert need.total.capacity == Decimal("5.00") and need.total.headroom == Decimal("1.00")
    assert need.teams[0].name == "Team Alpha" and need.teams[0].capacity is None


@pytest.fixture
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.mark.parametrize("role", ["lead_a", "finance_user", "engineer_b"])
def test_the_page_shows_both_tables_the_chart_and_the_need_to_every_role(month, frozen, client, request, role):
    client.force_login(request.getfixturevalue(role))
    response = client.get("/board/profile/", {"month": "2026-10"})
    assert response.status_code == 200
    html = response.content.decode()
    for marker in ('data-testid="profile-models"', 'data-testid="profile-teams"', 'data-testid="need-table"',
                   'id="fig-profile"', "vendor/plotly/plotly.min.js", "js/charts.js"):
        assert marker in html
    assert "Team Alpha" in html and "Team Beta" in html and "744.5000" in html and "99.9 %" in html
    assert "2.50" in html and "not enough history (1 month)" in html
    figure = json.loads(html.split('id="fig-profile" type="application/json">', 1)[1].split("</script>", 1)[0])
    roles = [trace["meta"]["role"] for trace in figure["data"]]
    assert roles.count("capacity") == 1 and max(figure["data"][-1]["y"]) == 3
    assert figure["layout"]["yaxis"]["title"]["text"] == "GPUs held (concurrent)"


def test_the_page_defaults_to_the_current_month_marked_partial(month, frozen, client, lead_a):
    client.force_login(lead_a)
    html = client.get("/board/profile/").content.decode()
    assert 'data-testid="partial-badge"' in html and "?month=2026-10" in html and "?month=2026-12" not in html


def test_the_page_needs_a_sign_in(client):
    response = client.get("/board/profile/")
    assert response.status_code == 302 and "login" in response["Location"]


def read_csv(response) -> list[dict]:
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_each_table_downloads_as_csv(month, frozen, client, finance_user, team_a):
    client.force_login(finance_user)
    team_a.name = "=HYPERLINK(1)"
    team_a.save()
    models = read_csv(client.get("/board/profile/", {"month": "2026-10", "format": "csv", "table": "models"}))
    assert [r["gpu_model"] for r in models] == ["H200", "L40S", "Total"]
    assert models[0]["peak_gpus_held"] == "2.00" and models[2]["card_hours_allocated"] == "747.5000"
    teams = read_csv(client.get("/board/profile/", {"month": "2026-10", "format": "csv", "table": "teams"}))
    assert teams[0]["team"] == "'=HYPERLINK(1)" and teams[0]["efficiency_pct"] == "99.9"
    need = read_csv(client.get("/board/profile/", {"month": "2026-10", "format": "csv", "table": "need"}))
    cluster = next(r for r in need if r["kind"] == "cluster")
    assert cluster["method"] == "not_enough_history" and cluster["months_used"] == "1"
    assert cluster["last_month_mean_gpus"] == "1.00" and cluster["capacity_gpus"] == "3.00"


@pytest.mark.parametrize(("params", "field"), [
    ({"month": "2026-13"}, "month"), ({"month": "October"}, "month"), ({"month": "2026-10-01"}, "month"),
    ({"month": "1999-12"}, "month"), ({"month": "2026-12"}, "month"), ({"month": "9999-01"}, "month"),
    ({"format": "csv", "table": "gpus"}, "table"), ({"format": "xls", "table": "teams"}, "format"),
])
def test_a_bad_parameter_is_refused_naming_it_and_the_rule(frozen, client, lead_a, params, field):
    client.force_login(lead_a)
    response = client.get("/board/profile/", params)
    assert response.status_code == 400
    html = response.content.decode()
    assert f"The “{field}” parameter must" in html and 'data-testid="profile-errors"' in html


def test_the_query_count_does_not_grow_with_the_cluster(month, frozen, client, lead_a, django_assert_num_queries):
    client.force_login(lead_a)
    client.get("/board/profile/", {"month": "2026-10"})  # warm the session
    # session and user 2, the profile 6, the need 4, the page's navigation 3
    with django_assert_num_queries(17):
        assert client.get("/board/profile/", {"month": "2026-10"}).status_code == 200
    more = make_gpus(20, month["l40s"], "more")
    store([(hour, gpu, "busy", None, HOUR) for hour in list(hours_of(OCTOBER))[:24] for gpu in more])
    with django_assert_num_queries(17):
        assert client.get("/board/profile/", {"month": "2026-10"}).status_code == 200
