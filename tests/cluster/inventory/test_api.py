import pytest

from cluster.models import Gpu, Node

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("who", ["engineer_a", "lead_a", "finance_user", "admin_user"])
def test_every_role_reads_nodes_and_gpus(api, small_cluster, request, who):
    client = api.as_user(request.getfixturevalue(who))
    nodes = client.get("/api/v1/nodes/").json()["results"]
    assert [n["hostname"] for n in nodes] == ["h200-a", "h200-b", "l40s-a"]
    assert [g["index"] for g in nodes[0]["gpus"]] == [0, 1]
    assert client.get("/api/v1/gpus/").json()["count"] == 6
    assert client.get("/api/v1/nodes/l40s-a/").json()["status"] == "maintenance"


def test_node_list_filters_like_the_inventory_page(api, engineer_a, small_cluster):
    client = api.as_user(engineer_a)
    assert [n["hostname"] for n in client.get("/api/v1/nodes/?model=L40S").json()["results"]] == ["l40s-a"]
    assert [n["hostname"] for n in client.get("/api/v1/nodes/?status=unreachable").json()["results"]] == ["h200-b"]
    bad = client.get("/api/v1/nodes/?status=melted")
    assert bad.status_code == 400
    assert bad.json()["status"] == ["Select a valid choice. melted is not one of the available choices."]
    assert bad.json()["detail"].startswith("status: Select a valid choice")


@pytest.mark.parametrize("who", ["engineer_a", "lead_a", "finance_user"])
def test_only_admins_write_inventory(api, small_cluster, request, who):
    client = api.as_user(request.getfixturevalue(who))
    assert client.post("/api/v1/nodes/", {"hostname": "new-node", "pool": "train"}).status_code == 403
    assert client.patch("/api/v1/nodes/h200-a/", {"status": "retired"}).status_code == 403
    assert client.delete(f"/api/v1/gpus/{Gpu.objects.first().pk}/").status_code == 403
    assert not Node.objects.filter(hostname="new-node").exists()
    assert Node.objects.get(hostname="h200-a").status == "up"


def test_admin_creates_a_node_and_a_gpu(api, admin_user, small_cluster):
    client = api.as_user(admin_user)
    node = client.post(
        "/api/v1/nodes/", {"hostname": "gpu-new-01", "pool": "train", "agent_url": "http://127.0.0.1:9499",
                           "agent_token": "0123456789abcdef0123", "labels": {"rack": "r9"}},
    )
    assert node.status_code == 201, node.json()
    assert node.json()["gpus"] == []
    gpu = client.post(
        "/api/v1/gpus/", {"node": "gpu-new-01", "index": 0, "uuid": "GPU-new-0", "model": "H200", "memory_mib": 143771}
    )
    assert gpu.status_code == 201, gpu.json()
    assert gpu.json()["fraction"] == "1"


@pytest.mark.parametrize(
    ("payload", "field", "rule"),
    [
        ({"hostname": "bad host!", "pool": "train"}, "hostname", "RFC 1123"),
        ({"hostname": "h200-a", "pool": "train"}, "hostname", "already exists"),
        ({"hostname": "ok-host", "pool": "train", "status": "exploded"}, "status", "not a valid choice"),
        ({"hostname": "ok-host", "pool": "train", "agent_token": "short"}, "agent_token", "at least 16"),
        ({"hostname": "ok-host", "pool": "train", "labels": ["a"]}, "labels", "string keys"),
    ],
)
def test_node_validation_names_the_field_and_rule(api, admin_user, small_cluster, payload, field, rule):
    response = api.as_user(admin_user).post("/api/v1/nodes/", payload)
    assert response.status_code == 400
    assert field in response.json()
    assert rule in " ".join(response.json()[field])
    assert response.json()["detail"].startswith(f"{field}: ")
    assert not Node.objects.filter(hostname="ok-host").exists()


def test_labels_are_an_object_of_scalars_in_the_schema_and_null_is_refused(api, admin_user, small_cluster):
    client = api.as_user(admin_user)
    response = client.post("/api/v1/nodes/", {"hostname": "ok-host", "pool": "train", "labels": None})
    assert response.status_code == 400
    assert response.json() == {"detail": "labels: This field may not be null.", "labels": ["This field may not be null."]}
    response = client.post("/api/v1/nodes/", {"hostname": "ok-host", "pool": "train", "labels": {"rack": "r1", "u": 4}})
    assert response.status_code == 201, response.json()
    assert Node.objects.get(hostname="ok-host").labels == {"rack": "r1", "u": 4}
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    labels = schema["components"]["schemas"]["NodeRequest"]["properties"]["labels"]
    assert labels["type"] == "object" and "nullable" not in labels
    assert labels["additionalProperties"] == {"oneOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}


def test_gpu_validation_refuses_a_fraction_without_mig(api, admin_user, small_cluster):
    response = api.as_user(admin_user).post(
        "/api/v1/gpus/",
        {"node": "h200-a", "index": 5, "uuid": "GPU-x", "model": "H200", "memory_mib": 1, "share": 120000},
    )
    assert response.status_code == 400
    assert "Only a MIG instance" in response.json()["share"][0]


def test_gpu_validation_refuses_a_duplicate_uuid(api, admin_user, small_cluster):
    response = api.as_user(admin_user).post(
        "/api/v1/gpus/", {"node": "h200-a", "index": 7, "uuid": "GPU-h200-b-0", "model": "H200", "memory_mib": 1}
    )
    assert response.status_code == 400
    assert "uuid" in response.json()


def test_the_api_needs_authentication(client, small_cluster):
    response = client.get("/api/v1/nodes/")
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def test_session_login_works_for_the_api(client, engineer_a, small_cluster):
    client.force_login(engineer_a)
    assert client.get("/api/v1/nodes/").status_code == 200


def test_node_list_query_count_is_pinned(api, engineer_a, small_cluster, django_assert_max_num_queries):
    client = api.as_user(engineer_a)
    with django_assert_max_num_queries(6):
        response = client.get("/api/v1/nodes/")
    assert response.status_code == 200
    nodes = response.json()["results"]
    assert [(n["hostname"], [g["index"] for g in n["gpus"]]) for n in nodes] == [
        ("h200-a", [0, 1]), ("h200-b", [0, 1]), ("l40s-a", [0, 1])]


def test_the_openapi_schema_describes_the_api(api, engineer_a):
    response = api.as_user(engineer_a).get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json()
    assert schema["openapi"].startswith("3.")
    for path in ["/api/v1/nodes/", "/api/v1/nodes/{hostname}/", "/api/v1/gpus/", "/api/v1/teams/", "/api/v1/tokens/"]:
        assert path in schema["paths"], path
    assert "agent_token" not in schema["components"]["schemas"]["Node"]["properties"]
    assert schema["components"]["schemas"]["Node"]["properties"]["hostname"]["type"] == "string"
