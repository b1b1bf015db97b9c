"""The usage report from two hand-made days: two teams, a job and a booking of team A, a job of team B
across midnight, a node outage, an unplaced job of team A, and an observed process of no team. Every
figure is checked in exact card-hours; partial days against the live computation; windows that add up;
who sees which rows; the query count."""

from collections import Counter, defaultdict
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accounting.models import DailyUnplacedUsage, DailyUsage
from accounting.usage.figures import apportion, row_figures
from accounting.usage.report import (
    COLUMNS,
    UsageReportRefused,
    report_columns,
    usage_report,
    usage_report_ticks,
    whole_days_and_edges,
)
from accounting.usage.services import aggregate_day, unplaced_of_window, usage_of_window, usage_recompute
from accounting.usage.states import ALLOCATED_STATES, STATES
from cluster.bookings.services import booking_create
from cluster.models import Allocation, Gpu, GpuModel, Job, MinuteRollup, Node, NodeStatusPeriod
from core.units import TICKS_PER_CARD_HOUR
from tests.conftest import T0

GPU = 840_000
NOW = T0 + timedelta(days=2, hours=1)  # the third day, 01:00: both days are over
TWO_DAYS = (T0, T0 + timedelta(days=2))
FIGURES = ["card_hours_allocated", "card_hours_busy", "card_hours_idle", "card_hours_unmeasured",
           "card_hours_unallocated", "card_hours_down", "capacity_card_hours"]


def at(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def rollups(gpu, start_h, end_h, util):
    MinuteRollup.objects.bulk_create([
        MinuteRollup(gpu=gpu, bucket=at(start_h) + timedelta(minutes=m), util_mean=util, util_max=util,
                     covered_s=60, util_covered_s=60, sample_count=6)
        for m in range(round((end_h - start_h) * 60))
    ])


def job(team, gpu, start_h, end_h, *, share=GPU, model=None, project=None, name="j", source="api"):
    run = Job.objects.create(source=source, external_id=f"{name}-{start_h}", team=team, project=project,
                             state="completed", start_time=at(start_h), end_time=at(end_h))
    Allocation.objects.create(job=run, gpu=gpu, gpu_model=model, share=share, start=at(start_h), end=at(end_h))


def make_usage_days(team_a, team_b, engineer_a) -> dict:
    """Days 2026-11-02 and -03 (UTC), aggregated. n1: g0, g1 (H200); n2: g2 (L40S)."""
    h200 = GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=143771)
    l40s = GpuModel.objects.create(name="NVIDIA L40S", short_name="L40S", memory_mib=46068)
    n1, n2 = Node.objects.create(hostname="n1"), Node.objects.create(hostname="n2")
    g0, g1 = (Gpu.objects.create(node=n1, index=i, uuid=f"G{i}", model=h200, memory_mib=1) for i in (0, 1))
    g2 = Gpu.objects.create(node=n2, index=0, uuid="G2", model=l40s, memory_mib=1)
    pre = team_a.projects.get()
    job(team_a, g0, 1, 3, project=pre, name="a-train")  # busy 1 h, idle 1 h
    rollups(g0, 1, 2, 50.0)
    rollups(g0, 2, 3, 1.0)
    job(team_b, g0, 22, 28, name="b-night")  # busy 22:00–02:00, unmeasured 02:00–04:00 of the next day
    rollups(g0, 22, 26, 90.0)
    booking_create(user=engineer_a, team=team_a, project=pre, gpus=[g1], start=at(10), end=at(12), now=T0)
    rollups(g1, 10, 11, 80.0)  # busy 1 h, unmeasured 1 h
    NodeStatusPeriod.objects.create(node=n1, status="unreachable", started_at=at(13.5), ended_at=at(14.5))
    job(None, g2, 26, 28, name="observed", source="observed")  # busy 2 h on day 2, no team
    rollups(g2, 26, 28, 60.0)
    job(team_a, None, 5, 7, share=2 * GPU, model=h200, name="a-unplaced")  # 4 card-hours, unmeasured
    usage_recompute(start=T0, end=T0 + timedelta(days=2), now=NOW)
    return {"g0": g0, "g1": g1, "g2": g2, "n1": n1, "n2": n2}


@pytest.fixture
def usage_days(team_a, team_b, engineer_a):
    return make_usage_days(team_a, team_b, engineer_a)


def table(report, *keys) -> list[tuple]:
    return [(tuple(row[k] for k in keys), tuple(row[f] for f in FIGURES)) for row in report.rows]


def D(*values) -> tuple:
    return tuple(None if v is None else Decimal(str(v)) for v in values)


def test_by_team(usage_days):
    report = usage_report(start=T0, end=T0 + timedelta(days=2), by="team", now=NOW)
    assert report.columns == COLUMNS
    assert table(report, "team", "cost_centre", "project", "gpu_model") == [
        (("Team Alpha", "CC-A1", None, None), D(8, 2, 1, 5, None, None, None)),  # unmeasured: 1 + 4 unplaced
        (("Team Beta", "CC-B2", None, None), D(6, 4, 0, 2, None, None, None)),
        ((None, None, None, None), D(2, 2, 0, 0, None, None, None)),  # the observed process of no team
    ]
    assert all(set(row) == set(COLUMNS) and (row["start"], row["end"]) == TWO_DAYS for row in report.rows)
    assert str(report.rows[0]["card_hours_allocated"]) == "8.0000"


def test_by_project(usage_days):
    report = usage_report(start=T0, end=T0 + timedelta(days=2), by="project", now=NOW)
    assert table(report, "team", "project") == [
        (("Team Alpha", "Alpha pretraining"), D(4, 2, 1, 1, None, None, None)),
        (("Team Alpha", None), D(4, 0, 0, 4, None, None, None)),
        (("Team Beta", None), D(6, 4, 0, 2, None, None, None)),
        ((None, None), D(2, 2, 0, 0, None, None, None)),
    ]


def test_by_gpu_model_node_and_gpu(usage_days):
    by_model = usage_report(start=T0, end=T0 + timedelta(days=2), by="gpu_model", now=NOW)
    assert table(by_model, "team", "project", "gpu_model") == [
        ((None, None, "H200"), D(10, 6, 1, 3, 84, 2, 96)),  # no unplaced: it is in no GPU's states
        ((None, None, "L40S"), D(2, 2, 0, 0, 46, 0, 48)),
    ]
    by_node = usage_report(start=T0, end=T0 + timedelta(days=2), by="node", now=NOW)
    assert by_node.columns == report_columns("node") and by_node.columns[6] == "node"
    assert table(by_node, "gpu_model", "node") == [
        (("H200", "n1"), D(10, 6, 1, 3, 84, 2, 96)),
        (("L40S", "n2"), D(2, 2, 0, 0, 46, 0, 48)),
    ]
    by_gpu = usage_report(start=T0, end=T0 + timedelta(days=2), by="gpu", now=NOW)
    assert by_gpu.columns[6] == "gpu"
    assert table(by_gpu, "gpu_model", "gpu") == [
        (("H200", "n1/0"), D(8, 5, 1, 2, 39, 1, 48)),
        (("H200", "n1/1"), D(2, 1, 0, 1, 45, 1, 48)),
        (("L40S", "n2/0"), D(2, 2, 0, 0, 46, 0, 48)),
    ]


def test_each_row_adds_up_to_the_rounded_total_by_largest_remainder(usage_days):
    # 02:50–03:10: g0 idle 10 min, then unallocated 10 min; all live (within one day).
    report = usage_report(start=at(2 + 50 / 60), end=at(3 + 10 / 60), by="gpu", now=NOW)
    assert table(report, "gpu")[0] == (("n1/0",), D("0.1667", 0, "0.1667", 0, "0.1666", 0, "0.3333"))
    for row in report.rows:
        parts = [row[f"card_hours_{state}"] for state in STATES]
        assert sum(parts) == row["capacity_card_hours"]
        assert row["card_hours_allocated"] == sum(row[f"card_hours_{s}"] for s in ALLOCATED_STATES)


def test_data_complete_to_is_the_clusters_and_the_nodes(usage_days):
    usage_days["n2"].status = "maintenance"  # a node recorded down is complete up to now
    usage_days["n2"].save()
    by_node = usage_report(start=T0, end=T0 + timedelta(days=2), by="node", now=NOW)
    assert [row["data_complete_to"] for row in by_node.rows] == [None, NOW]  # n1 never collected
    assert by_node.data_complete_to is None
    by_team = usage_report(start=T0, end=T0 + timedelta(days=2), by="team", now=NOW)
    assert {row["data_complete_to"] for row in by_team.rows} == {None}


def live_ticks(start, end, by) -> dict:
    """The figures straight from usage_of_window / unplaced_of_window, grouped like the report's keys."""
    out: dict = defaultdict(Counter)
    for (gpu_id, state, team_id, project_id), ticks in usage_of_window(start=start, end=end, now=NOW).items():
        if by == "gpu":
            out[gpu_id][state] += ticks
        elif state in ALLOCATED_STATES:
            out[team_id if by == "team" else (team_id, project_id)][state] += ticks
    if by != "gpu":
        for (team_id, project_id, _model), ticks in unplaced_of_window(start=start, end=end, now=NOW).items():
            out[team_id if by == "team" else (team_id, project_id)]["unmeasured"] += ticks
    return dict(out)


@pytest.mark.parametrize("by", ["team", "project", "gpu"])
def test_a_window_cutting_days_equals_the_live_computation(usage_days, by):
    start, end = at(-6), at(24 + 2 + 20 / 60)  # 18:00 the day before to 02:20 of day 2: day 1 from aggregates
    days, edges = whole_days_and_edges(start, end)
    assert days == (date(2026, 11, 2), date(2026, 11, 2)) and edges == [(start, T0), (at(24), end)]
    live = live_ticks(start, end, by)
    assert usage_report_ticks(start=start, end=end, by=by, now=NOW) == live
    if by == "gpu":
        rows = usage_report(start=start, end=end, by=by, now=NOW).rows
        assert rows[2]["card_hours_busy"] == Decimal("0.3333")  # 20 minutes of the observed process
        assert [row_figures(live[gpu.pk], gpu_level=True)["capacity_card_hours"] for gpu in usage_days.values()
                if isinstance(gpu, Gpu)] == [row["capacity_card_hours"] for row in rows]


def test_full_days_come_from_the_aggregates(usage_days):
    DailyUsage.objects.all().delete()
    DailyUnplacedUsage.objects.all().delete()
    assert usage_report(start=T0, end=at(48), by="team", now=NOW).rows == []
    assert usage_report(start=T0, end=at(23), by="team", now=NOW).rows != []  # within a day: live


@pytest.mark.parametrize("by", ["team", "project", "gpu_model", "node", "gpu"])
@pytest.mark.parametrize("cut_h", [13, 24, 26 + 20 / 60])
def test_two_adjacent_windows_add_up_to_the_whole(usage_days, by, cut_h):
    whole = usage_report_ticks(start=T0, end=at(48), by=by, now=NOW)
    first = usage_report_ticks(start=T0, end=at(cut_h), by=by, now=NOW)
    second = usage_report_ticks(start=at(cut_h), end=at(48), by=by, now=NOW)
    summed: dict = defaultdict(Counter)
    for part in (first, second):
        for key, ticks in part.items():
            summed[key].update(ticks)
    assert dict(summed) == whole


def test_nothing_after_now_is_counted(usage_days):
    aggregate_day(day=date(2026, 11, 4), now=NOW)  # the open day, up to 01:00
    for end in (at(72), at(60), at(49)):
        rows = usage_report(start=T0, end=end, by="gpu", now=NOW).rows
        assert {row["capacity_card_hours"] for row in rows} == {Decimal(49)}, end


def test_a_business_zone_other_than_utc(usage_days, settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "Asia/Shanghai"
    shanghai = ZoneInfo("Asia/Shanghai")
    start, end = datetime(2026, 11, 2, 6, 0, tzinfo=shanghai), datetime(2026, 11, 4, 0, 0, tzinfo=shanghai)
    usage_recompute(start=start, end=end, now=NOW)
    days, edges = whole_days_and_edges(start, end)
    assert days == (date(2026, 11, 3), date(2026, 11, 3)) and edges == [(start, datetime(2026, 11, 3, tzinfo=shanghai))]
    assert usage_report_ticks(start=start, end=end, by="team", now=NOW) == live_ticks(start, end, "team")
    assert usage_report_ticks(start=start, end=end, by="gpu", now=NOW) == live_ticks(start, end, "gpu")


def test_a_lead_and_an_engineer_see_their_teams_rows_only(usage_days, lead_a, engineer_a, lead_b, engineer_b):
    def teams(user, by="team"):
        return [row["team"] for row in usage_report(start=T0, end=at(48), by=by, user=user, now=NOW).rows]

    assert teams(lead_a) == ["Team Alpha"]
    assert teams(engineer_a, "project") == ["Team Alpha", "Team Alpha"]
    assert teams(lead_b) == teams(engineer_b) == ["Team Beta"]


def test_admin_and_finance_see_every_team_and_the_unattributed_row(usage_days, admin_user, finance_user):
    for user in (admin_user, finance_user):
        rows = usage_report(start=T0, end=at(48), by="team", user=user, now=NOW).rows
        assert [row["team"] for row in rows] == ["Team Alpha", "Team Beta", None]


def test_someone_not_signed_in_sees_nothing(usage_days):
    from django.contrib.auth.models import AnonymousUser

    for by in ("team", "gpu"):
        assert usage_report(start=T0, end=at(48), by=by, user=AnonymousUser(), now=NOW).rows == []


def test_every_role_gets_the_cluster_wide_gpu_rows(usage_days, engineer_a, lead_b):
    everyone = usage_report(start=T0, end=at(48), by="gpu_model", now=NOW).rows
    assert usage_report(start=T0, end=at(48), by="gpu_model", user=engineer_a, now=NOW).rows == everyone
    assert usage_report(start=T0, end=at(48), by="node", user=lead_b, now=NOW).rows != []


@pytest.mark.parametrize("by", ["team", "gpu"])
def test_the_query_count_does_not_grow_with_days_or_teams(usage_days, lead_a, finance_user, by,
                                                          django_assert_num_queries):
    from teams.models import Team

    expected = {"team": 23, "gpu": 18}[by]  # the same with 1 whole day or 30, 2 teams or 7
    for days in (1, 30):
        user = type(lead_a).objects.get(pk=lead_a.pk)  # a fresh request's user: roles not cached yet
        with django_assert_num_queries(expected):
            usage_report(start=at(-12 - 24 * (days - 1)), end=at(36), by=by, user=user, now=NOW)
    for n in range(5):  # five more teams with usage: finance sees 7 teams in as many queries as 3
        team = Team.objects.create(name=f"Team {n}", slug=f"t{n}", cost_centre="CC")
        DailyUnplacedUsage.objects.create(day=date(2026, 11, 2), team=team, ticks=GPU)
    for with_extra_teams in (True, False):
        if not with_extra_teams:
            DailyUnplacedUsage.objects.filter(team__slug__startswith="t").delete()
        user = type(finance_user).objects.get(pk=finance_user.pk)
        with django_assert_num_queries(expected - (by == "team")):  # no membership query for finance
            rows = usage_report(start=at(-12), end=at(36), by=by, user=user, now=NOW).rows
        # By team, the five extra teams' rows come and go; by GPU, their unplaced usage adds no GPU row.
        assert len(rows) == {"team": 8 if with_extra_teams else 3, "gpu": 3}[by]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"start": T0.replace(tzinfo=None)}, "start"),  # naive
    ({"end": at(48) + timedelta(seconds=30)}, "end"),
    ({"start": T0 + timedelta(microseconds=1)}, "start"),
    ({"end": T0}, "end"),
    ({"start": T0 - timedelta(days=401)}, "end"),
    ({"by": "month"}, "by"),
])
def test_bad_parameters_are_refused_naming_the_field(db, kwargs, field):
    asked = {"start": T0, "end": at(48), "by": "team", "now": NOW, **kwargs}
    with pytest.raises(UsageReportRefused) as refused:
        usage_report(**asked)
    assert refused.value.field == field and str(refused.value).startswith(f"{field}: ")
    assert isinstance(refused.value, ValueError)


def test_whole_minutes_are_whole_in_utc(usage_days):
    nepal = ZoneInfo("Asia/Kathmandu")  # +05:45: a local whole minute is a UTC whole minute
    start = datetime(2026, 11, 2, 5, 45, tzinfo=nepal)
    assert start.astimezone(UTC) == T0
    rows = usage_report(start=start, end=at(1), by="gpu", now=NOW).rows
    assert [row["capacity_card_hours"] for row in rows] == [1, 1, 1]
    with pytest.raises(UsageReportRefused, match="start: Must be on a whole minute"):
        usage_report(start=datetime(2026, 11, 2, 5, 45, 30, tzinfo=nepal), end=at(1), by="gpu", now=NOW)


# ---- apportion (pure) --------------------------------------------------------------------------------------

def test_apportion_gives_the_extra_units_to_the_largest_remainders():
    third = TICKS_PER_CARD_HOUR // 3
    assert apportion({"a": third, "b": third, "c": third}) == {
        "a": Decimal("0.3334"), "b": Decimal("0.3333"), "c": Decimal("0.3333")}
    assert apportion({"a": TICKS_PER_CARD_HOUR // 10_000 // 2, "b": 0}) == {"a": Decimal("0.0001"), "b": 0}
    assert str(apportion({"a": 0})["a"]) == "0.0000"
    with pytest.raises(ValueError, match="negative"):
        apportion({"a": -1})


@given(st.dictionaries(st.sampled_from(STATES), st.integers(min_value=0, max_value=10**18), max_size=5))
def test_apportion_adds_up_and_stays_within_a_unit(ticks):
    rounded = apportion(ticks)
    exact_total = Fraction(sum(ticks.values()), TICKS_PER_CARD_HOUR)
    half_up_total = Decimal(int(exact_total * 10_000 + Fraction(1, 2))).scaleb(-4)
    assert sum(rounded.values(), Decimal(0)) == half_up_total
    for part, value in rounded.items():
        assert value.as_tuple().exponent == -4
        assert abs(Fraction(value) - Fraction(ticks[part], TICKS_PER_CARD_HOUR)) < Fraction(1, 10_000)


def test_team_rows_have_no_capacity_figures():
    figures = row_figures({"busy": TICKS_PER_CARD_HOUR, "unmeasured": TICKS_PER_CARD_HOUR // 2}, gpu_level=False)
    assert figures == {"card_hours_allocated": Decimal("1.5"), "card_hours_busy": 1, "card_hours_idle": 0,
                       "card_hours_unmeasured": Decimal("0.5"), "card_hours_unallocated": None,
                       "card_hours_down": None, "capacity_card_hours": None}
