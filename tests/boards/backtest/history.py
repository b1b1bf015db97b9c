"""A small recorded day for the backtest's DB tests, on the shared ``small_cluster`` (two H200 nodes in pool
``train``, an L40S node in ``infer``), on business day :data:`DAY` (minutes from its local midnight ``lo``):

- team A's job J1 on H200 GPUs 0 and 1, minutes 60–179 (submitted at 30), 80 % utilization, half its memory used;
- team B's job J2 on H200 GPU 2, minutes 120–239, 40 %;
- team A's booking of H200 GPU 3, minutes 300–359, 10 %;
- team A's job J4 asking for 1.5 H200s, submitted at minute 400 and never started (2 GPUs queued from then on);
- H200 GPU 0 reporting 1 % while free, minutes 0–59; an L40S busy all day for team A (another model: not in scope).
"""

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal

from accounting.models import RateCard
from cluster.models import Allocation, Booking, Gpu, GpuHold, HoldKind, Job, MinuteRollup
from core.timeutils import business_day_bounds
from core.units import WHOLE_GPU_SHARE

DAY = date(2026, 10, 5)
PRICE = Decimal("20")


@dataclass
class History:
    lo: datetime
    gpus: list[Gpu]
    h200: object


def _rollups(gpu, lo: datetime, first: int, last: int, util: float, memory_share: float = 0.0) -> list[MinuteRollup]:
    return [MinuteRollup(gpu=gpu, bucket=lo + timedelta(minutes=m), util_mean=util, util_max=util,
                         mem_used_max_mib=int(gpu.memory_mib * memory_share), covered_s=60, util_covered_s=60,
                         sample_count=6) for m in range(first, last)]


def _job(team, name, gpus, lo, first, last, *, submitted=None, util=80.0, memory_share=0.5, model=None):
    start, end = lo + timedelta(minutes=first), lo + timedelta(minutes=last)
    job = Job.objects.create(source="api", external_id=name, team=team, state="completed", gpu_count=len(gpus),
                             gpu_model=model, submit_time=lo + timedelta(minutes=submitted if submitted is not None else first),
                             start_time=start, end_time=end)
    rows = []
    for gpu in gpus:
        Allocation.objects.create(job=job, gpu=gpu, share=WHOLE_GPU_SHARE, start=start, end=end)
        rows += _rollups(gpu, lo, first, last, util, memory_share)
    MinuteRollup.objects.bulk_create(rows)


def make_history(small_cluster, team_a, team_b, booker, settings) -> History:
    lo = business_day_bounds(DAY)[0]
    h200, l40s = small_cluster["h200"], small_cluster["l40s"]
    gpus = list(Gpu.objects.filter(model=h200).order_by("node__hostname", "index"))
    _job(team_a, "j1", gpus[:2], lo, 60, 180, submitted=30, model=h200)
    _job(team_b, "j2", gpus[2:3], lo, 120, 240, util=40.0, memory_share=0.25)
    _job(team_a, "l40s", list(Gpu.objects.filter(model=l40s)[:1]), lo, 0, 1440)
    MinuteRollup.objects.bulk_create(_rollups(gpus[0], lo, 0, 60, 1.0))
    start, end = lo + timedelta(minutes=300), lo + timedelta(minutes=360)
    booking = Booking.objects.create(team=team_a, booker=booker, created_by=booker, mode="gpus", gpu_count=1,
                                     start=start, end=end, booked_end=end, created_at=start - timedelta(days=1))
    GpuHold.objects.create(gpu=gpus[3], during=(start, end), kind=HoldKind.BOOKING, booking=booking, team=team_a,
                           booker=booker)
    MinuteRollup.objects.bulk_create(_rollups(gpus[3], lo, 300, 360, 10.0, 0.1))
    Job.objects.create(source="api", external_id="j4", team=team_a, state="pending", gpu_count=Decimal("1.5"),
                       gpu_model=h200, submit_time=lo + timedelta(minutes=400))
    RateCard.objects.create(gpu_model=h200, valid_from=date(2026, 10, 1), price_per_card_hour=PRICE,
                            currency=settings.CARDHOUR_CURRENCY)
    return History(lo=lo, gpus=gpus, h200=h200)
