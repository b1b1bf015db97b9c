"""Bad input on the API gets a 4xx in the API's error shape, never a 500 (issue 17): page sizes out of
range, deletes of rows others refer to, NUL characters, deep JSON, duplicate names, oversized bodies and
unknown paths."""

import json
import re

import pytest
from django.urls import reverse

from cluster.models import Gpu
from teams.models import Project, Team

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


# ---- found by the contract test (tests/config/test_api_contract.py) ----------------------------------------

def _schema(api) -> dict:
    response = api.get("/api/v1/schema/", {"format": "json"})
    assert response.status_code == 200
    return json.loads(response.content)


@pytest.mark.django_db
def test_the_schema_documents_401_403_and_429_and_lets_optional_query_parameters_be_empty(api, admin_user):
    schema = _schema(api.as_user(admin_user))
    error = {"$ref": "#/components/schemas/ApiError"}
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for code in ("401", "403", "429"):
                assert operation["responses"][code]["content"]["application/json"]["schema"] == error, (path, code)
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "query" and not parameter.get("required"):
                    assert parameter["allowEmptyValue"] is True, (path, method, parameter["name"])
                else:
                    assert "allowEmptyValue" not in parameter, (path, method, parameter["name"])
    limit = next(p for p in schema["paths"]["/api/v1/teams/"]["get"]["parameters"] if p["name"] == "limit")
    assert limit["allowEmptyValue"] is True


@pytest.mark.django_db
def test_an_empty_page_size_or_offset_reads_as_absent(api, admin_user, team_a, team_b):
    response = api.as_user(admin_user).get(reverse("team-list"), {"limit": "", "offset": ""})
    assert response.status_code == 200, response.content
    assert response.json()["count"] == 2 and len(response.json()["results"]) == 2


@pytest.mark.django_db
@pytest.mark.parametrize("content_type", ["multipart", "application/x-www-form-urlencoded"])
def test_the_api_takes_json_bodies_only(api, admin_user, content_type):
    client = api.as_user(admin_user)
    if content_type == "multipart":
        response = client.post(reverse("team-list"), {"name": "Gamma", "slug": "gamma"}, format="multipart")
    else:
        response = client.post(reverse("team-list"), "name=Gamma&slug=gamma", content_type=content_type)
    assert response.status_code == 415, response.content
    assert "Unsupported media type" in _detail(response)
    assert not Team.objects.filter(slug="gamma").exists()
    operation = _schema(client)["paths"]["/api/v1/teams/"]["post"]
    assert list(operation["requestBody"]["content"]) == ["application/json"]


@pytest.mark.django_db
def test_a_number_sent_for_a_text_field_or_a_decimal_is_a_400_naming_it(api, admin_user, small_cluster):
    client = api.as_user(admin_user)
    response = client.post(reverse("team-list"), {"name": "Gamma", "slug": "gamma", "cost_centre": 5})
    assert response.status_code == 400
    assert response.json() == {"detail": "cost_centre: Not a valid string.", "cost_centre": ["Not a valid string."]}
    assert not Team.objects.filter(slug="gamma").exists()
    response = client.post(reverse("ratecard-list"), {"gpu_model": "H200", "valid_from": "2026-11-01",
                                                      "price_per_card_hour": 0.1})
    assert response.status_code == 400
    assert response.json()["price_per_card_hour"] == [
        'A decimal is sent as a JSON string, as the API shows it: "8" or "18.50", not 8 or 18.5.']
    response = client.post(reverse("ratecard-list"), {"gpu_model": "H200", "valid_from": "2026-11-01",
                                                      "price_per_card_hour": "0.1"})
    assert response.status_code == 201, response.content


@pytest.mark.django_db
def test_a_decimal_pattern_needs_a_digit_and_has_a_sign_only_where_negatives_may_be(api, admin_user):
    components = _schema(api.as_user(admin_user))["components"]["schemas"]
    price = components["RateCardRequest"]["properties"]["price_per_card_hour"]
    assert price["type"] == "string" and price["format"] == "decimal"
    pattern = re.compile(price["pattern"])
    for good in ("18", "18.5", "18.", ".5", "0", "1234567890.1234"):
        assert pattern.fullmatch(good), good
    for bad in ("", "-", ".", "-1", "1.23456", "1e5", " 1"):
        assert not pattern.fullmatch(bad), bad
    assert price["pattern"] == r"^(?:\d{1,10}(?:\.\d{0,4})?|\.\d{1,4})$"
