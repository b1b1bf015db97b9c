import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_it_lists_every_node_with_its_gpus(client, engineer_a, small_cluster):
    client.force_login(engineer_a)
    response = client.get(reverse("cluster:inventory"))
    assert response.status_code == 200
    assert [n.hostname for n in response.context["nodes"]] == ["h200-a", "h200-b", "l40s-a"]
    assert response.context["summary"].gpu_count == 6
    assert response.context["summary"].gpus_by_model == [("H200", 4), ("L40S", 2)]
    assert b"GPU-h200-b-1" in response.content


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"pool": "infer"}, ["l40s-a"]),
        ({"model": "H200"}, ["h200-a", "h200-b"]),
        ({"status": "unreachable"}, ["h200-b"]),
        ({"pool": "train", "status": "up"}, ["h200-a"]),
    ],
)
def test_it_filters_by_pool_model_and_status(client, engineer_a, small_cluster, query, expected):
    client.force_login(engineer_a)
    response = client.get(reverse("cluster:inventory"), query)
    assert [n.hostname for n in response.context["nodes"]] == expected


def test_it_explains_a_bad_filter_value(client, engineer_a, small_cluster):
    client.force_login(engineer_a)
    response = client.get(reverse("cluster:inventory"), {"status": "melted"})
    assert response.status_code == 200
    assert "Select a valid choice" in response.content.decode()


def test_it_pins_the_query_count(client, engineer_a, small_cluster, django_assert_num_queries):
    client.force_login(engineer_a)
    with django_assert_num_queries(14):  # 10, the GPUs' holders and utilization (4; test_holder_pages.py)
        response = client.get(reverse("cluster:inventory"))
    assert response.status_code == 200
    assert [n.hostname for n in response.context["nodes"]] == ["h200-a", "h200-b", "l40s-a"]
    assert all(hostname in response.content.decode() for hostname in ("h200-a", "h200-b", "l40s-a"))


def test_node_detail_shows_gpus_and_mig_instances(client, engineer_a, small_cluster):
    from cluster.models import Gpu

    parent = Gpu.objects.get(uuid="GPU-h200-a-0")
    Gpu.objects.create(
        node=parent.node, index=0, uuid="MIG-1", model=parent.model, memory_mib=20096,
        mig_parent=parent, mig_profile="2g.20gb", share=240000,
    )
    client.force_login(engineer_a)
    response = client.get(reverse("cluster:node-detail", args=["h200-a"]))
    assert response.status_code == 200
    body = response.content.decode()
    assert "GPU-h200-a-1" in body
    assert "2g.20gb (2/7)" in body


def test_an_unknown_node_is_a_styled_404(client, engineer_a, small_cluster):
    client.force_login(engineer_a)
    response = client.get(reverse("cluster:node-detail", args=["nope"]))
    assert response.status_code == 404
    assert "There is nothing here" in response.content.decode()
    assert 'data-nav="inventory"' in response.content.decode()  # the site's layout, not Django's bare page


def test_pages_need_a_login(client, small_cluster):
    response = client.get(reverse("cluster:inventory"))
    assert response.status_code == 302
    assert response.url.startswith(reverse("login"))
