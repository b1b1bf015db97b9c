"""Who holds each GPU now (cluster/inventory/holders.py), on hand-made rows at a fixed moment, as each role."""

from datetime import timedelta

import pytest

from cluster.bookings.services import maintenance_create
from cluster.inventory.filters import nodes_with_gpus
from cluster.inventory.holders import (
    HolderState,
    HoldingKind,
    current_holdings,
    current_utilization,
    gpu_state,
    gpus_now,
    node_gpus,
)
from cluster.models import Allocation, AllocationOrigin, Gpu, Job, JobSource, JobState, Node
from tests.cluster.inventory.holders_cast import NOW, make_cast

pytestmark = pytest.mark.django_db


@pytest.fixture
def cast(small_cluster, team_a, team_b, lead_b):
    return make_cast(small_cluster, team_a, team_b, lead_b)


def everything_now(user):
    return gpus_now(user, node_gpus(list(nodes_with_gpus())), now=NOW)


def test_it_finds_running_jobs_and_bookings_and_leaves_finished_ones_out(cast, admin_user):
    held = current_holdings(admin_user, [cast.gpu0.pk, cast.gpu1.pk, cast.mig1.pk, cast.mig2.pk], now=NOW)
    (on_gpu0,) = held[cast.gpu0.pk]  # the cancelled hold and nothing else
    assert (on_gpu0.kind, on_gpu0.team, on_gpu0.object_id) == (HoldingKind.JOB, "Team Alpha", cast.job_a.pk)
    assert (on_gpu0.label, on_gpu0.user, on_gpu0.project) == ("1001 · alpha-secret-job", "alice-a", "Alpha pretraining")
    (on_gpu1,) = held[cast.gpu1.pk]  # the finished job ended an hour ago
    assert (on_gpu1.kind, on_gpu1.team, on_gpu1.object_id) == (HoldingKind.BOOKING, "Team Beta", cast.booking_id)
    assert (on_gpu1.label, on_gpu1.user, on_gpu1.project) == (
        f"#{cast.booking_id} · beta-secret-purpose", "bo-lead-b", "Beta vision",
    )
    (on_mig1,) = held[cast.mig1.pk]  # a MIG instance is held apart from its parent
    assert (on_mig1.kind, on_mig1.object_id) == (HoldingKind.JOB, cast.job_b.pk)
    assert cast.mig2.pk not in held


def test_a_job_holds_until_its_end_and_not_at_it(cast, admin_user):
    at_end = NOW + timedelta(hours=1)
    assert cast.mig1.pk not in current_holdings(admin_user, [cast.mig1.pk], now=at_end)
    assert cast.mig1.pk in current_holdings(admin_user, [cast.mig1.pk], now=at_end - timedelta(seconds=1))
    assert current_holdings(admin_user, [cast.gpu0.pk], now=NOW - timedelta(hours=4)) == {}  # not started yet


def test_a_running_observed_job_holds_while_its_process_was_seen_lately(small_cluster, admin_user):
    gpu = Gpu.objects.get(uuid="GPU-h200-a-0")
    seen = Job.objects.create(source=JobSource.OBSERVED, external_id="pid-1", state=JobState.RUNNING, start_time=NOW)
    Allocation.objects.create(
        job=seen, gpu=gpu, share=gpu.share, start=NOW - timedelta(hours=1), end=NOW - timedelta(minutes=2),
        origin=AllocationOrigin.OBSERVED,
    )
    (holding,) = current_holdings(admin_user, [gpu.pk], now=NOW)[gpu.pk]
    assert holding.team == "Unattributed" and holding.object_id == seen.pk
    assert current_holdings(admin_user, [gpu.pk], now=NOW + timedelta(minutes=10)) == {}


def test_utilization_is_the_newest_measured_minute_of_the_last_five_and_none_without_one(cast):
    utilization = current_utilization([cast.gpu0.pk, cast.gpu1.pk, cast.mig1.pk, cast.mig2.pk], now=NOW)
    assert utilization[cast.gpu0.pk][0] == 80.0  # not the older 10 %, not the newer minute without a value
    assert utilization[cast.mig1.pk][0] == 3.0
    assert cast.gpu1.pk not in utilization  # no rollup: no figure, never 0
    assert cast.mig2.pk not in utilization  # ten minutes old is not "now"


def test_each_gpu_gets_its_state(cast, admin_user):
    now_by_gpu = everything_now(admin_user)
    states = {gpu.uuid: now_by_gpu[gpu.pk].state for gpu in Gpu.objects.all()}
    assert states == {
        "GPU-h200-a-0": HolderState.BUSY,
        "GPU-h200-a-1": HolderState.NO_DATA,
        "MIG-h200-a-1-1": HolderState.IDLE,
        "MIG-h200-a-1-2": HolderState.FREE,
        "GPU-h200-b-0": HolderState.DOWN,  # its node is unreachable, though a job holds it
        "GPU-h200-b-1": HolderState.DOWN,
        "GPU-l40s-a-0": HolderState.DOWN,  # its node is in maintenance
        "GPU-l40s-a-1": HolderState.DOWN,
    }
    assert now_by_gpu[cast.gpu1.pk].util_pct is None
    assert now_by_gpu[cast.mig2.pk].util_pct is None
    assert now_by_gpu[cast.far_gpu.pk].teams == ["Team Alpha"]


def test_a_maintenance_window_takes_the_gpus_down(small_cluster, admin_user):
    node = Node.objects.get(hostname="h200-a")
    maintenance_create(node=node, start=NOW - timedelta(hours=1), end=NOW + timedelta(hours=1), reason="swap PSU")
    now_by_gpu = everything_now(admin_user)
    for gpu in Gpu.objects.filter(node=node):
        (holding,) = now_by_gpu[gpu.pk].holdings
        assert now_by_gpu[gpu.pk].state == HolderState.DOWN
        assert (holding.kind, holding.team, holding.label) == (HoldingKind.MAINTENANCE, "", "Maintenance")


@pytest.mark.parametrize(
    ("util", "held", "down", "state"),
    [
        (None, False, False, HolderState.FREE),
        (90.0, False, False, HolderState.FREE),
        (None, True, False, HolderState.NO_DATA),
        (0.0, True, False, HolderState.IDLE),
        (4.99, True, False, HolderState.IDLE),
        (5.0, True, False, HolderState.BUSY),
        (100.0, True, True, HolderState.DOWN),
    ],
)
def test_gpu_state(util, held, down, state):
    assert gpu_state(down=down, held=held, util_pct=util, idle_threshold_pct=5) == state


def test_every_state_has_its_own_colour():
    assert len({state.colour for state in HolderState}) == len(HolderState)


@pytest.mark.parametrize(
    ("viewer", "sees_a", "sees_b"),
    [
        ("admin_user", True, True),
        ("finance_user", True, True),
        ("lead_a", True, False),
        ("engineer_a", True, False),
        ("lead_b", False, True),
        ("engineer_b", False, True),
    ],
)
def test_another_teams_holdings_show_only_the_team(request, cast, viewer, sees_a, sees_b):
    user = request.getfixturevalue(viewer)
    now_by_gpu = everything_now(user)
    for gpu, team, visible in [
        (cast.gpu0, "Team Alpha", sees_a), (cast.far_gpu, "Team Alpha", sees_a),
        (cast.gpu1, "Team Beta", sees_b), (cast.mig1, "Team Beta", sees_b),
    ]:
        (holding,) = now_by_gpu[gpu.pk].holdings
        assert holding.team == team
        assert holding.visible is visible
        if not visible:
            assert (holding.object_id, holding.label, holding.user, holding.project) == (None, "", "", "")
        else:
            assert holding.object_id is not None and holding.label and holding.user and holding.project


@pytest.mark.parametrize(("viewer", "queries"), [("admin_user", 4), ("engineer_a", 5)])
def test_the_query_count_does_not_grow_with_gpus_or_holdings(
    request, cast, small_cluster, team_a, viewer, queries, django_assert_num_queries
):
    user = request.getfixturevalue(viewer)
    gpus = node_gpus(list(nodes_with_gpus()))
    with django_assert_num_queries(queries):  # groups, (the viewer's teams,) allocations, holds, rollups
        gpus_now(user, gpus, now=NOW)
    big = Node.objects.create(hostname="big", pool="train")
    for index in range(16):
        gpu = Gpu.objects.create(node=big, index=index, uuid=f"GPU-big-{index}", model=small_cluster["h200"],
                                 memory_mib=1000)
        Allocation.objects.create(job=cast.job_a, gpu=gpu, share=gpu.share, start=NOW - timedelta(hours=1))
    user = type(user).objects.get(pk=user.pk)  # no cached groups
    gpus = node_gpus(list(nodes_with_gpus()))
    with django_assert_num_queries(queries):
        now_by_gpu = gpus_now(user, gpus, now=NOW)
    assert len(now_by_gpu) == 8 + 16
