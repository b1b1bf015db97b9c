"""The inventory and node pages say who holds each GPU now, as each role may see it, in a pinned number of queries."""

from datetime import timedelta

import pytest
import time_machine
from django.urls import reverse

from cluster.models import Allocation, Gpu, Node
from tests.cluster.inventory.holders_cast import A_SECRETS, B_SECRETS, NOW, make_cast

pytestmark = pytest.mark.django_db

# session, user, pools, nodes, GPUs, MIG instances, the viewer's groups and teams, allocations, holds, rollups,
# the nav's memberships, unread notifications, GPU models (the filter)
INVENTORY_QUERIES = 14
# session, user, node, GPUs, MIG instances, the viewer's groups and teams, allocations, holds, rollups, the day's
# series, health (3), the nav's memberships, unread notifications, the day's GPU % and SM activity per GPU
NODE_QUERIES = 17


@pytest.fixture(autouse=True)
def frozen_clock():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def cast(small_cluster, team_a, team_b, lead_b):
    return make_cast(small_cluster, team_a, team_b, lead_b)


def chip(body, uuid):
    """The inventory chip of one whole GPU (its MIG instances included)."""
    start = body.index(f"· {uuid} ·")
    return body[body.rindex("<span class=\"gpu ", 0, start):body.index("</span>\n        \n", start)]


def row(body, uuid):
    start = body.index(f'data-gpu="{uuid}"')
    return body[start:body.index("</tr>", start)]


def test_inventory_chips_show_the_holder_state_and_utilization(client, cast, engineer_a):
    client.force_login(engineer_a)
    body = client.get(reverse("cluster:inventory")).content.decode()
    busy = chip(body, "GPU-h200-a-0")
    assert "gpu gpu-green" in busy and "Team Alpha" in busy and "80 %" in busy
    assert f'href="/jobs/{cast.job_a.pk}/"' in busy and ">1001 · alpha-secret-job<" in busy
    booked = chip(body, "GPU-h200-a-1")
    assert "gpu gpu-nodata" in booked and "Team Beta" in booked and "no data" in booked
    assert 'class="slice gpu-amber"' in booked and 'class="slice gpu-free"' in booked  # the MIG instances
    down = chip(body, "GPU-l40s-a-0")
    assert "gpu gpu-red" in down and "Down" in down
    assert "0 %" not in booked  # no measurement is never 0 %


def test_the_node_page_lists_holders_per_gpu_and_mig_instance(client, cast, lead_a):
    client.force_login(lead_a)
    response = client.get(reverse("cluster:node-detail", args=["h200-a"]))
    body = response.content.decode()
    gpu0 = row(body, "GPU-h200-a-0")
    assert "Held, busy" in gpu0 and "Team Alpha" in gpu0 and "alice-a" in gpu0 and "Alpha pretraining" in gpu0
    assert f'href="/jobs/{cast.job_a.pk}/">job 1001 · alpha-secret-job</a>' in gpu0 and "80 %" in gpu0
    gpu1 = row(body, "GPU-h200-a-1")
    assert "Held, no data" in gpu1 and "Team Beta" in gpu1 and "a booking" in gpu1 and "no data" in gpu1
    mig1 = row(body, "MIG-h200-a-1-1")
    assert 'class="mig-row"' in body and "1g.10gb (1/7)" in mig1 and "Held, idle" in mig1 and "3 %" in mig1
    assert "Free" in row(body, "MIG-h200-a-1-2")


def test_a_booking_links_to_its_week_for_its_team(client, cast, engineer_b):
    client.force_login(engineer_b)
    gpu1 = row(client.get(reverse("cluster:node-detail", args=["h200-a"])).content.decode(), "GPU-h200-a-1")
    assert f'href="/bookings/?week=2026-11-02">booking #{cast.booking_id} · beta-secret-purpose</a>' in gpu1


@pytest.mark.parametrize(
    ("viewer", "hidden", "shown"),
    [
        ("admin_user", (), A_SECRETS + B_SECRETS),
        ("finance_user", (), A_SECRETS + B_SECRETS),
        ("lead_a", B_SECRETS, A_SECRETS),
        ("engineer_a", B_SECRETS, A_SECRETS),
        ("lead_b", A_SECRETS, B_SECRETS),
        ("engineer_b", A_SECRETS, B_SECRETS),
    ],
)
@pytest.mark.parametrize("page", ["inventory", "node"])
def test_another_teams_job_user_and_project_never_reach_the_html(request, client, cast, viewer, hidden, shown, page):
    client.force_login(request.getfixturevalue(viewer))
    url = reverse("cluster:inventory") if page == "inventory" else reverse("cluster:node-detail", args=["h200-a"])
    body = client.get(url).content.decode()
    assert "Team Alpha" in body and "Team Beta" in body  # every role sees who holds a GPU
    for secret in hidden:
        assert secret not in body, secret
    for secret in shown:
        if page == "inventory" and secret in ("Alpha pretraining", "Beta vision"):
            continue  # chips leave the project out
        assert secret in body, secret
    if hidden:
        assert f"/jobs/{(cast.job_b if 'beta-secret-job' in hidden else cast.job_a).pk}/" not in body


def add_node(small_cluster, job, hostname, gpus):
    node = Node.objects.create(hostname=hostname, pool="train")
    for index in range(gpus):
        gpu = Gpu.objects.create(
            node=node, index=index, uuid=f"GPU-{hostname}-{index}", model=small_cluster["h200"], memory_mib=1000
        )
        Allocation.objects.create(job=job, gpu=gpu, share=gpu.share, start=NOW - timedelta(hours=1))
    return node


def test_the_inventory_query_count_is_pinned_whatever_the_gpus_and_holders(
    client, cast, small_cluster, engineer_a, django_assert_num_queries
):
    client.force_login(engineer_a)
    client.get(reverse("cluster:inventory"))
    with django_assert_num_queries(INVENTORY_QUERIES):
        assert client.get(reverse("cluster:inventory")).status_code == 200
    for n in range(3):
        add_node(small_cluster, cast.job_b, f"more-{n}", 8)
    with django_assert_num_queries(INVENTORY_QUERIES):
        body = client.get(reverse("cluster:inventory")).content.decode()
    assert body.count('data-testid="gpu-chip"') == 6 + 24


def test_the_node_page_query_count_is_pinned_whatever_the_gpus_and_holders(
    client, cast, small_cluster, engineer_a, django_assert_num_queries
):
    add_node(small_cluster, cast.job_b, "big", 16)
    client.force_login(engineer_a)
    client.get(reverse("cluster:node-detail", args=["h200-a"]))
    with django_assert_num_queries(NODE_QUERIES):
        assert client.get(reverse("cluster:node-detail", args=["h200-a"])).status_code == 200
    with django_assert_num_queries(NODE_QUERIES):
        body = client.get(reverse("cluster:node-detail", args=["big"])).content.decode()
    assert body.count('data-testid="holders"') == 16
