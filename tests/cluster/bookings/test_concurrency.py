"""Bookings under contention, against the real PostgreSQL (DESIGN.md §6): many requests at once for the
same GPU give exactly one booking and clean 409s; the exclusion constraint refuses an overlap written
by raw SQL; picks by model under contention give each winner distinct GPUs.

Each thread runs the service in its own database connection (Django's are per thread) and closes it, so
the transactional test's teardown finds no connection left open."""

import threading
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction

from cluster.bookings.services import BookingRefused, booking_create
from cluster.models import Booking, Gpu, GpuHold, GpuModel, Node
from tests.conftest import T0

pytestmark = pytest.mark.django_db(transaction=True)

NOW = T0 + timedelta(hours=8)
START, END = T0 + timedelta(hours=10), T0 + timedelta(hours=12)


def race(threads: int, attempt: Callable[[int], Booking]) -> tuple[list[Booking], list[BookingRefused]]:
    """Run ``attempt(i)`` in ``threads`` threads released together by a barrier; (bookings, refusals)."""
    barrier = threading.Barrier(threads)
    booked: list[Booking] = []
    refused: list[BookingRefused] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            try:
                outcome = attempt(i)
            except BookingRefused as exc:
                with lock:
                    refused.append(exc)
            else:
                with lock:
                    booked.append(outcome)
        except BaseException as exc:  # reported by race()'s caller through the errors list
            with lock:
                errors.append(exc)
        finally:
            connection.close()

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert not any(worker.is_alive() for worker in workers)
    assert errors == []
    return booked, refused


def test_fifty_requests_for_one_gpu_give_one_booking_and_49_conflicts(small_cluster, engineer_a, team_a):
    target = Gpu.objects.get(node__hostname="h200-a", index=0)

    booked, refused = race(50, lambda i: booking_create(
        user=engineer_a, team=team_a, gpus=[target], start=START, end=END, note=f"try {i}", now=NOW,
    ))

    assert len(booked) == 1 and len(refused) == 49
    assert {(exc.status, exc.field) for exc in refused} == {(409, "gpus")}
    assert Booking.objects.count() == 1
    hold = GpuHold.objects.get()
    assert (hold.gpu_id, hold.booking_id, hold.during.lower, hold.during.upper) == (target.pk, booked[0].pk, START, END)


def test_a_raw_sql_overlap_is_refused_by_the_database(small_cluster, engineer_a, team_a):
    target = Gpu.objects.get(node__hostname="h200-a", index=0)
    booking = booking_create(user=engineer_a, team=team_a, gpus=[target], start=START, end=END, now=NOW)

    insert = (
        "INSERT INTO cluster_gpuhold (gpu_id, during, kind, booking_id, team_id, booker_id, active) "
        "VALUES (%s, tstzrange(%s, %s, '[)'), 'booking', %s, %s, %s, true)"
    )
    with pytest.raises(IntegrityError) as refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(insert, [target.pk, START + timedelta(hours=1), END + timedelta(hours=1), booking.pk,
                                team_a.pk, engineer_a.pk])
    assert "gpu_hold_no_overlap" in str(refused.value)
    assert refused.value.__cause__.diag.constraint_name == "gpu_hold_no_overlap"

    # Touching ranges do not overlap ([10:00, 12:00) then [12:00, 13:00)); an inactive hold blocks nothing.
    with connection.cursor() as cursor:
        cursor.execute(insert, [target.pk, END, END + timedelta(hours=1), booking.pk, team_a.pk, engineer_a.pk])
        cursor.execute("UPDATE cluster_gpuhold SET active = false WHERE during @> %s::timestamptz",
                       [END + timedelta(minutes=30)])
        cursor.execute(insert.replace("true)", "false)"),
                       [target.pk, START, END, booking.pk, team_a.pk, engineer_a.pk])
    # Re-activating the cancelled hold over the live one is refused too: any path that writes.
    with pytest.raises(IntegrityError, match="gpu_hold_no_overlap"), transaction.atomic(), connection.cursor() as cur:
        cur.execute("UPDATE cluster_gpuhold SET active = true WHERE NOT active AND during = tstzrange(%s, %s, '[)')",
                    [START, END])
    assert GpuHold.objects.filter(gpu=target, active=True).count() == 1


@pytest.fixture
def a100s(db):
    """Four A100s on two up nodes (a100-a, a100-b), two on each."""
    model = GpuModel.objects.create(name="NVIDIA A100-SXM4-80GB", short_name="A100", memory_mib=81920)
    for hostname in ("a100-a", "a100-b"):
        node = Node.objects.create(hostname=hostname, pool="train")
        for index in range(2):
            Gpu.objects.create(node=node, index=index, uuid=f"GPU-{hostname}-{index}", model=model, memory_mib=81920)
    return model


def held_gpus(booking: Booking) -> list[str]:
    return sorted(str(hold.gpu) for hold in booking.holds.select_related("gpu__node").filter(active=True))


@pytest.mark.parametrize(("threads", "count", "winners"), [(6, 1, 4), (5, 2, 2)])
def test_picks_by_model_under_contention_take_distinct_gpus_or_get_a_clean_409(
    a100s, engineer_a, team_a, threads, count, winners,
):
    booked, refused = race(threads, lambda _i: booking_create(
        user=engineer_a, team=team_a, gpu_model=a100s, count=count, start=START, end=END, now=NOW,
    ))

    assert len(booked) == winners and len(refused) == threads - winners
    assert {(exc.status, exc.field) for exc in refused} == {(409, "count")}
    assert all("are not free" in exc.message for exc in refused)
    taken = [held_gpus(booking) for booking in booked]
    assert all(len(gpus) == count for gpus in taken)
    every = [name for gpus in taken for name in gpus]
    assert sorted(every) == ["a100-a/0", "a100-a/1", "a100-b/0", "a100-b/1"]  # each once: none shared
    if count == 2:  # packed: each booking's pair on one node
        assert all(len({name.split("/")[0] for name in gpus}) == 1 for gpus in taken)
    assert Booking.objects.count() == winners
    assert GpuHold.objects.filter(active=True).count() == 4
