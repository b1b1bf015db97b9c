"""Shallow busy, idle with memory held and busy at idle power (issue 16) through the aggregation, the ranking,
the daily board and the team page, on hand-made minute rollups: an H200 with GPM and an L40S without."""

import random
from datetime import date, timedelta
from decimal import Decimal

import pytest
import time_machine

from accounting.models import DailyHolderUsage, DailyUsage, RateCard, UsageAggregateState
from accounting.money.idle_ranking import rank_idle
from accounting.usage.inputs import minute_codes_by_gpu
from accounting.usage.services import aggregate_day
from accounting.usage.states import BUSY, IDLE, Refinement, minute_code
from cluster.bookings.slots import epoch
from cluster.models import Gpu, GpuModel, MinuteRollup, Node
from tests.accounting.usage.usage_day import DAY, NOW, at, job

pytestmark = pytest.mark.django_db
GPU = 840_000
HOUR_TICKS = GPU * 3600


def minutes(gpu, start_h, end_h, *, util, sm=None, memory_mib=None, power_w=None):
    count = round((end_h - start_h) * 60)
    MinuteRollup.objects.bulk_create([
        MinuteRollup(gpu=gpu, bucket=at(start_h) + timedelta(minutes=m), util_mean=util, util_max=util, covered_s=60,
                     util_covered_s=60, sample_count=6, sm_active_mean=sm, gpm_covered_s=60 if sm is not None else 0,
                     mem_used_max_mib=memory_mib, power_mean_w=power_w)
        for m in range(count)
    ])


@pytest.fixture
def refined_day(team_a, team_b):
    h200 = GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=143771)
    l40s = GpuModel.objects.create(name="NVIDIA L40S", short_name="L40S", memory_mib=46068)
    node = Node.objects.create(hostname="n1")
    hopper = Gpu.objects.create(node=node, index=0, uuid="GPU-h", model=h200, memory_mib=143771)
    ada = Gpu.objects.create(node=node, index=1, uuid="GPU-l", model=l40s, memory_mib=46068)
    RateCard.objects.create(gpu_model=h200, valid_from=date(2026, 1, 1), price_per_card_hour=Decimal("20.00"),
                            currency="CNY")
    RateCard.objects.create(gpu_model=l40s, valid_from=date(2026, 1, 1), price_per_card_hour=Decimal("8.00"),
                            currency="CNY")
    # team A's job on the H200, 01:00–05:00: an hour busy at SM 70, an hour busy at SM 10 (shallow), an
    # hour busy at 80 W (under the H200's 100 W floor), an hour idle with 20 GB held; then idle, empty.
    train = job(team_a, hopper, 1, 6, name="a-train")
    minutes(hopper, 1, 2, util=90, sm=70, memory_mib=60_000, power_w=500)
    minutes(hopper, 2, 3, util=90, sm=10, memory_mib=60_000, power_w=300)
    minutes(hopper, 3, 4, util=90, sm=50, memory_mib=60_000, power_w=80)
    minutes(hopper, 4, 5, util=1, sm=0, memory_mib=20_000, power_w=90)
    minutes(hopper, 5, 6, util=1, sm=0, memory_mib=400, power_w=75)
    # team B's job on the L40S, 01:00–03:00, busy: the L40S has no GPM, so no SM data
    infer = job(team_b, ada, 1, 3, name="b-infer")
    minutes(ada, 1, 3, util=60, memory_mib=30_000, power_w=200)
    aggregate_day(day=DAY, now=NOW)
    UsageAggregateState.objects.update_or_create(id=1, defaults={"aggregated_to": NOW})
    return {"hopper": hopper, "ada": ada, "train": train, "infer": infer}


def test_the_sql_minute_codes_are_the_reference_codes(team_a, settings):
    settings.CARDHOUR_SHALLOW_SM_PCT, settings.CARDHOUR_MEMORY_HELD_MIB = 25, 1024
    settings.CARDHOUR_IDLE_POWER_FLOOR_W = {"H200": 100}
    model = GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=143771)
    other = GpuModel.objects.create(name="NVIDIA A40", short_name="A40", memory_mib=46068)
    node = Node.objects.create(hostname="n1")
    gpus = [Gpu.objects.create(node=node, index=0, uuid="GPU-a", model=model, memory_mib=1),
            Gpu.objects.create(node=node, index=1, uuid="GPU-b", model=other, memory_mib=1)]
    rng = random.Random(16)
    rows = []
    for gpu in gpus:
        for m in range(240):
            covered = rng.choice([0, 30, 60])
            sm = rng.choice([None, 0.0, 24.9, 25.0, 80.0])
            rows.append(MinuteRollup(
                gpu=gpu, bucket=at(0) + timedelta(minutes=m), util_mean=rng.choice([None, 0.0, 4.9, 5.0, 90.0]),
                util_max=None, covered_s=covered, util_covered_s=covered, sample_count=1, sm_active_mean=sm,
                gpm_covered_s=covered if sm is not None else 0, mem_used_max_mib=rng.choice([None, 500, 1024, 1025]),
                power_mean_w=rng.choice([None, 99.9, 100.0, 300.0])))
    MinuteRollup.objects.bulk_create(rows)
    codes = minute_codes_by_gpu([g.pk for g in gpus], epoch(at(0)), epoch(at(4)), 5)
    for row in rows:
        refine = Refinement(shallow_sm_pct=25, memory_held_mib=1024,
                            power_floor_w=100 if row.gpu_id == gpus[0].pk else None)
        want = minute_code(row.util_mean if row.util_covered_s else None, row.util_covered_s, 5, sm=row.sm_active_mean,
                           memory_mib=row.mem_used_max_mib, power_w=row.power_mean_w, refine=refine)
        index = (epoch(row.bucket) - epoch(at(0))) // 60
        assert codes[row.gpu_id][0][index] == want, row.__dict__


def test_the_aggregation_refines_busy_and_idle_without_changing_them(refined_day, team_a, team_b):
    hopper = {(r.state, r.team_id): r for r in DailyUsage.objects.filter(day=DAY, gpu=refined_day["hopper"])}
    busy, idle = hopper[(BUSY, team_a.pk)], hopper[(IDLE, team_a.pk)]
    assert (busy.ticks, busy.sm_ticks, busy.shallow_ticks, busy.low_power_ticks) == (
        3 * HOUR_TICKS, 3 * HOUR_TICKS, HOUR_TICKS, HOUR_TICKS)
    assert (idle.ticks, idle.memory_held_ticks, idle.sm_ticks, idle.shallow_ticks) == (2 * HOUR_TICKS, HOUR_TICKS, 0, 0)
    ada = DailyUsage.objects.get(day=DAY, gpu=refined_day["ada"], state=BUSY)
    assert (ada.ticks, ada.sm_ticks, ada.shallow_ticks, ada.low_power_ticks) == (2 * HOUR_TICKS, 0, 0, 0)
    held = DailyHolderUsage.objects.get(day=DAY, job=refined_day["train"], state=IDLE)
    assert held.memory_held_ticks == HOUR_TICKS


def test_the_ranking_lists_shallow_busy_apart_from_idle_and_prices_it(refined_day, admin_user):
    rows, total = rank_idle(DAY, DAY, user=admin_user)
    by_job = {row.object_id: row for row in rows}
    train, infer = by_job[refined_day["train"].pk], by_job[refined_day["infer"].pk]
    assert total == 2
    assert (train.idle_card_hours, train.memory_held_card_hours, train.empty_idle_card_hours) == (
        Decimal("2.0000"), Decimal("1.0000"), Decimal("1.0000"))
    assert train.shallow_card_hours == Decimal("1.0000")
    assert (train.idle_cost, train.shallow_cost) == (Decimal("40.00"), Decimal("20.00"))  # 2 h and 1 h at 20.00
    assert infer.shallow_card_hours is None and infer.shallow_cost is None  # no SM data, not 0


def test_the_board_and_the_team_page_show_shallow_busy_memory_held_and_idle_power(refined_day, client, admin_user,
                                                                                   team_a):
    client.force_login(admin_user)
    with time_machine.travel(NOW, tick=False):
        board = client.get("/", {"date": DAY.isoformat()})
        body = client.get("/api/v1/boards/daily/", {"date": DAY.isoformat()})
        team_page = client.get(f"/teams/{team_a.slug}/")
    assert board.status_code == body.status_code == team_page.status_code == 200
    html = board.content.decode()
    assert "Shallow busy: 1.0 card-hours (33.3 % of the busy card-hours with SM data, 60 % of all busy ones)" in html
    assert "Idle: 1.0 card-hours with memory held (over 1024 MiB in use: a notebook or a stuck job), 1.0 empty." in html
    assert "no SM data" in html  # the L40S job's row
    assert "n1/0" in html.split('data-testid="idle-power"')[1].split("</table>")[0]
    figures = body.json()
    assert figures["beyond_duty_cycle"] == {
        "card_hours_busy": "5.0000", "card_hours_busy_with_sm_data": "3.0000", "card_hours_shallow_busy": "1.0000",
        "shallow_share_pct": "33.3", "card_hours_busy_at_idle_power": "1.0000", "card_hours_idle": "2.0000",
        "card_hours_idle_memory_held": "1.0000", "no_sm_data": False,
    }
    assert [row["gpu"] for row in figures["busy_at_idle_power"]] == ["n1/0"]
    assert figures["busy_at_idle_power"][0]["floor_w"] == 100
    ranked = {row["label"]: row for row in figures["idle_allocations"]}
    assert ranked["a-train-1"]["card_hours_shallow_busy"] == "1.0000"
    assert ranked["b-infer-1"]["card_hours_shallow_busy"] is None
    team_html = team_page.content.decode()
    assert "Shallow busy: 1.0 card-hours (33.3 % of the busy card-hours with SM data, 100 % of all busy ones)" in team_html
    assert "1.00 memory held" in team_html
