"""Bad input on the API gets a 4xx in the API's error shape, never a 500 (issue 17): page sizes out of
range, deletes of rows others refer to, NUL characters, deep JSON, duplicate names, oversized bodies and
unknown paths."""

import json

import pytest
from django.urls import reverse

from cluster.models import Gpu
from teams.models import Project

LISTS = ["gpumodel", "node", "gpu", "job", "booking", "team", "project", "membership", "apitoken", "ratecard",
         "energytariff", "quota", "moneychange"]


def _detail(response) -> str:
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    return response.json()["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["admin_user", "engineer_a"])
def test_every_list_refuses_a_page_size_or_offset_out_of_range_with_a_400(api, role, request, small_cluster):
    api.as_user(request.getfixturevalue(role))
    listed = 0
    for name in [*(f"{basename}-list" for basename in LISTS), "statement-list"]:
        url = reverse(name)
        plain = api.get(url, {"limit": 1000})
        if role == "admin_user":
            assert plain.status_code == 200, (name, plain.status_code)
        if plain.status_code != 200:
            assert plain.status_code in (403, 404), (name, plain.status_code)
            continue
        listed += 1
        for params, field in (({"limit": "100000000000000000000"}, "limit"), ({"limit": 1001}, "limit"),
                              ({"limit": 0}, "limit"), ({"limit": "ten"}, "limit"),
                              ({"offset": "100000000000000000000"}, "offset"), ({"offset": -1}, "offset")):
            response = api.get(url, params)
            assert response.status_code == 400, (name, params, response.status_code)
            assert _detail(response).startswith(f"{field}: A whole number from"), (name, params)
    assert listed >= 6


@pytest.mark.django_db
def test_a_delete_of_a_row_others_refer_to_is_a_409_naming_what_refers_to_it(api, admin_user, small_cluster, team_a):
    api.as_user(admin_user)
    model = small_cluster["h200"]
    response = api.delete(reverse("gpumodel-detail", args=[model.pk]))
    assert response.status_code == 409
    assert _detail(response) == "Still referred to by 4 GPUs: remove or reassign them first."
    assert response.json()["referred_by"] == {"GPUs": 4}
    assert Gpu.objects.filter(model=model).count() == 4  # nothing deleted
    projects = Project.objects.filter(team=team_a).count()
    assert projects >= 1
    response = api.delete(reverse("team-detail", args=[team_a.slug]))
    assert response.status_code == 409
    named = "1 project" if projects == 1 else f"{projects} projects"
    assert _detail(response).startswith(f"Still referred to by {named}")
    assert Project.objects.filter(team=team_a).count() == projects


@pytest.mark.django_db
def test_a_nul_character_is_a_400_on_the_api_and_a_404_on_a_page(api, client, admin_user, small_cluster, team_a):
    api.as_user(admin_user)
    response = api.get("/api/v1/teams/a%00/")
    assert response.status_code == 400 and "NUL" in _detail(response)
    assert api.get("/api/v1/jobs/", {"team": "l\x00lm"}).status_code == 400
    for name in ("job-list", "booking-list", "quota-list", "project-list"):
        response = api.post(reverse(name), data=json.dumps({"team": "l\u0000lm", "name": "x"}),
                            content_type="application/json")
        assert response.status_code == 400, name
        assert "NUL character" in _detail(response), name
    client.force_login(admin_user)
    assert client.get("/inventory/nodes/a%00b/").status_code == 404


@pytest.mark.django_db
def test_json_nested_a_thousand_deep_is_a_400(api, admin_user):
    api.as_user(admin_user)
    body = "[" * 1000 + "]" * 1000
    response = api.post(reverse("project-list"), data=body, content_type="application/json")
    assert response.status_code == 400 and "nested deeper than 32 levels" in _detail(response)
    response = api.post(reverse("job-list"), data='{"a": ' * 40 + "1" + "}" * 40, content_type="application/json")
    assert response.status_code == 400 and "nested deeper" in _detail(response)


@pytest.mark.django_db
def test_a_duplicate_project_name_is_a_400_naming_the_field(api, admin_user, team_a):
    api.as_user(admin_user)
    Project.objects.create(team=team_a, name="Pretraining", slug="pretraining")
    before = Project.objects.filter(team=team_a).count()
    response = api.post(reverse("project-list"), {"team": team_a.slug, "name": "PRETRAINING", "slug": "pt-2"})
    assert response.status_code == 400
    assert response.json()["name"] == ["This team already has a project of this name."]
    assert _detail(response).startswith("name: ")
    assert Project.objects.filter(team=team_a).count() == before


@pytest.mark.django_db
def test_an_oversized_body_an_unknown_path_and_a_wrong_method_answer_in_the_api_shape(api, admin_user, settings):
    api.as_user(admin_user)
    big = json.dumps({"name": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)})
    response = api.post(reverse("project-list"), data=big, content_type="application/json")
    assert response.status_code == 413 and "larger than" in _detail(response)
    response = api.get("/api/v1/no-such-list/")
    assert response.status_code == 404 and _detail(response) == "Not found."
    response = api.put(reverse("board-daily"))
    assert response.status_code == 405 and _detail(response)


@pytest.mark.django_db
def test_the_schema_documents_each_operations_400_and_404_in_the_error_shape(api, admin_user):
    api.as_user(admin_user)
    response = api.get("/api/v1/schema/", {"format": "json"})
    assert response.status_code == 200
    schema = json.loads(response.content)
    error = {"$ref": "#/components/schemas/ApiError"}
    operations = [(path, method, op) for path, item in schema["paths"].items() for method, op in item.items()]
    assert len(operations) >= 60
    for path, method, operation in operations:
        codes = {"400", *(["404"] if "{" in path else []), *(["409"] if method == "delete" else [])}
        for code in codes:
            assert operation["responses"][code]["content"]["application/json"]["schema"] == error, (path, method, code)
