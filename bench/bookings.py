"""Benchmark of the availability search (``cluster.bookings.selectors.availability``): 1,000 GPUs of one
model and 10,000 existing bookings over the coming weeks; requests of 1 to 64 GPUs for 2 to 24 hours.

Baselines in the same run: one SQL query that lists the GPUs free over one fixed window (the least a
search can cost), and a naive search that asks that query again at each grid step until enough GPUs
are free. Both searches must find the same slot. Run by ``make bench`` against a scratch database."""

from __future__ import annotations

import random
import statistics
import time
from datetime import UTC, datetime, timedelta

from django.contrib.auth import get_user_model
from django.db.backends.postgresql.psycopg_any import DateTimeTZRange
from django.db.models import Exists, OuterRef

from cluster.bookings.holds import bookable_gpus
from cluster.bookings.selectors import availability
from cluster.models import Booking, Gpu, GpuHold, GpuModel, HoldKind, Node
from teams.models import Team

T0 = datetime(2026, 11, 2, tzinfo=UTC)
NODES, GPUS_PER_NODE, BOOKINGS_PER_GPU = 125, 8, 10
HALF_HOUR = timedelta(minutes=30)


def _cluster() -> tuple[GpuModel, Team, object]:
    model, _ = GpuModel.objects.get_or_create(
        name="NVIDIA B200 (bench)", defaults={"short_name": "B200-bench", "memory_mib": 183359}
    )
    for n in range(NODES):
        node, _ = Node.objects.get_or_create(hostname=f"bench-book-{n:03d}", defaults={"pool": "bench"})
        Gpu.objects.bulk_create([
            Gpu(node=node, index=i, uuid=f"GPU-bench-book-{n:03d}-{i}", model=model, memory_mib=model.memory_mib)
            for i in range(GPUS_PER_NODE)
        ], ignore_conflicts=True)
    team, _ = Team.objects.get_or_create(slug="bench-book", defaults={"name": "Bench bookings", "cost_centre": "BB"})
    user, _ = get_user_model().objects.get_or_create(username="bench-booker")
    return model, team, user


def _bookings(model: GpuModel, team: Team, user) -> int:
    """Ten back-to-back-ish bookings per GPU (1–24 h long, 0–12 h apart), one hold each."""
    rng = random.Random(5)
    gpus = list(Gpu.objects.filter(model=model).order_by("pk").values_list("pk", flat=True))
    bookings, spans = [], []
    for gpu_id in gpus:
        moment = T0 + rng.randrange(0, 25) * HALF_HOUR
        for _ in range(BOOKINGS_PER_GPU):
            end = moment + rng.randrange(2, 49) * HALF_HOUR
            bookings.append(Booking(
                team=team, booker=user, created_by=user, mode="gpus", gpu_model=model, gpu_count=1,
                start=moment, end=end, booked_end=end, created_at=T0,
            ))
            spans.append((gpu_id, moment, end))
            moment = end + rng.randrange(0, 25) * HALF_HOUR
    Booking.objects.bulk_create(bookings, batch_size=2000)
    GpuHold.objects.bulk_create([
        GpuHold(gpu_id=gpu_id, during=DateTimeTZRange(lo, hi), kind=HoldKind.BOOKING, booking=booking, team=team,
                booker=user)
        for booking, (gpu_id, lo, hi) in zip(bookings, spans, strict=True)
    ], batch_size=2000)
    return len(bookings)


def _free_over(model: GpuModel, start: datetime, end: datetime) -> int:
    """The baseline: how many GPUs of ``model`` are free over one window, in one SQL query."""
    busy = GpuHold.objects.overlapping(start, end).filter(gpu=OuterRef("pk"))
    return bookable_gpus().filter(model=model).exclude(Exists(busy)).count()


def _naive_search(model: GpuModel, count: int, start: datetime, end: datetime) -> datetime | None:
    length, moment = end - start, start
    while moment <= T0 + timedelta(days=28):
        if _free_over(model, moment, moment + length) >= count:
            return moment
        moment += HALF_HOUR
    return None


def _clear(model: GpuModel) -> None:
    GpuHold.objects.filter(gpu__model=model).delete()
    Booking.objects.filter(team__slug="bench-book").delete()


def bench_availability(requests: int = 12) -> dict:
    model, team, user = _cluster()
    _clear(model)
    made = _bookings(model, team, user)
    rng = random.Random(9)
    asks = [(rng.choice((1, 8, 64, 256, 512, 768)), T0 + rng.randrange(0, 96) * HALF_HOUR, rng.randrange(4, 49))
            for _ in range(requests)]
    search_s, one_window_s, naive_s, waits = [], [], [], []
    for count, start, steps in asks:
        end = start + steps * HALF_HOUR
        started = time.perf_counter()
        found = availability(gpu_model=model, count=count, start=start, end=end, now=T0)
        search_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        _free_over(model, start, end)
        one_window_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        naive = _naive_search(model, count, start, end)
        naive_s.append(time.perf_counter() - started)
        assert (found.slot.start if found.slot else None) == naive, (count, start, steps, found.slot, naive)
        assert found.slot is None or len(found.picked) == count
        waits.append((found.slot.start - start) / timedelta(hours=1) if found.slot else None)
    _clear(model)
    search, one_window, naive = (statistics.median(v) for v in (search_s, one_window_s, naive_s))
    return {
        "gpus": NODES * GPUS_PER_NODE, "bookings": made, "requests": requests,
        "search_ms": search * 1000, "one_window_query_ms": one_window * 1000, "naive_search_ms": naive * 1000,
        "search_vs_one_window": search / one_window, "naive_vs_search": naive / search,
        "median_wait_h": statistics.median([w for w in waits if w is not None] or [0]),
    }
