"""API tokens are stored only as hashes; node agent tokens only encrypted."""

from datetime import timedelta
from io import StringIO

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIRequestFactory

from cluster.models import Node
from teams.authentication import HashedTokenAuthentication
from teams.models import ApiToken
from teams.tokens import hash_token

pytestmark = pytest.mark.django_db


def all_text_in_table(table: str) -> str:
    """Every value of every row of a table, as one string: what a leaked dump would show."""
    with connection.cursor() as cursor:
        cursor.execute(f'SELECT * FROM "{table}"')  # noqa: S608 (a model's own table name)
        return " ".join(str(value) for row in cursor.fetchall() for value in row)


def test_it_stores_only_the_hash_of_a_personal_token(api, engineer_a):
    response = api.as_user(engineer_a).post("/api/v1/tokens/", {"name": "laptop"})
    assert response.status_code == 201
    raw = response.json()["token"]
    assert raw.startswith("chk_") and len(raw) > 40
    stored = all_text_in_table(ApiToken._meta.db_table)
    assert raw not in stored
    assert raw[4:] not in stored
    assert ApiToken.objects.get(name="laptop").key_hash == hash_token(raw)
    # The token is never shown again.
    listed = api.get("/api/v1/tokens/").json()["results"]
    assert all("token" not in row for row in listed)


def test_it_stores_only_the_hash_of_a_service_token(db):
    out = StringIO()
    call_command("create_api_token", "--service", "slurm", stdout=out)
    raw = out.getvalue().strip()
    token = ApiToken.objects.get(user__username="svc-slurm")
    assert token.kind == "service"
    assert not token.user.has_usable_password()
    assert raw not in all_text_in_table(ApiToken._meta.db_table)
    request = APIRequestFactory().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert HashedTokenAuthentication().authenticate(request) == (token.user, token)


def test_it_authenticates_with_a_bearer_token_and_refuses_revoked_and_expired(client, engineer_a):
    token, raw = ApiToken.issue(user=engineer_a, name="ci")
    assert client.get("/api/v1/nodes/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    token.revoke()
    response = client.get("/api/v1/nodes/", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 401
    assert "revoked" in response.json()["detail"]
    _expired, raw2 = ApiToken.issue(user=engineer_a, name="old", expires_at=timezone.now() - timedelta(seconds=1))
    assert client.get("/api/v1/nodes/", HTTP_AUTHORIZATION=f"Bearer {raw2}").status_code == 401
    assert client.get("/api/v1/nodes/", HTTP_AUTHORIZATION="Bearer chk_made-up").status_code == 401


def test_it_refuses_a_token_of_a_deactivated_user(client, engineer_a):
    _token, raw = ApiToken.issue(user=engineer_a, name="ci")
    engineer_a.is_active = False
    engineer_a.save()
    assert client.get("/api/v1/nodes/", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 401


def test_a_user_sees_and_revokes_only_their_own_tokens(api, engineer_a, engineer_b):
    other, _raw = ApiToken.issue(user=engineer_b, name="theirs")
    client = api.as_user(engineer_a)
    names = [row["name"] for row in client.get("/api/v1/tokens/").json()["results"]]
    assert names == ["test"]
    assert client.delete(f"/api/v1/tokens/{other.pk}/").status_code == 404
    other.refresh_from_db()
    assert other.revoked_at is None


def test_it_keeps_the_node_token_encrypted_at_rest(small_cluster):
    node = Node.objects.get(hostname="h200-a")
    node.agent_token = "node-secret-token-0123456789"
    node.save()
    stored = all_text_in_table(Node._meta.db_table)
    assert "node-secret-token-0123456789" not in stored
    assert "fernet:" in stored
    assert Node.objects.get(pk=node.pk).agent_token == "node-secret-token-0123456789"


def test_it_names_the_key_problem_when_the_encryption_key_changed(small_cluster, settings):
    node = Node.objects.get(hostname="h200-a")
    node.agent_token = "node-secret-token-0123456789"
    node.save()
    settings.FIELD_ENCRYPTION_KEYS = [Fernet.generate_key().decode()]
    with pytest.raises(ImproperlyConfigured, match="FIELD_ENCRYPTION_KEY"):
        Node.objects.get(pk=node.pk)


def test_it_reads_old_secrets_after_a_key_rotation(small_cluster, settings):
    node = Node.objects.get(hostname="h200-a")
    node.agent_token = "node-secret-token-0123456789"
    node.save()
    settings.FIELD_ENCRYPTION_KEYS = [Fernet.generate_key().decode(), *settings.FIELD_ENCRYPTION_KEYS]
    assert Node.objects.get(pk=node.pk).agent_token == "node-secret-token-0123456789"


def test_the_api_never_returns_the_node_token(api, admin_user, small_cluster):
    client = api.as_user(admin_user)
    response = client.patch("/api/v1/nodes/h200-a/", {"agent_token": "a-brand-new-token-0123"}, format="json")
    assert response.status_code == 200, response.json()
    assert "agent_token" not in response.json()
    assert response.json()["has_agent_token"] is True
    assert "a-brand-new-token-0123" not in client.get("/api/v1/nodes/h200-a/").content.decode()
    assert Node.objects.get(hostname="h200-a").agent_token == "a-brand-new-token-0123"


def test_a_token_cannot_expire_in_the_past(api, engineer_a):
    response = api.as_user(engineer_a).post("/api/v1/tokens/", {"name": "x", "expires_at": "2020-01-01T00:00:00Z"})
    assert response.status_code == 400
    assert response.json()["detail"] == "expires_at: An expiry must be in the future."
    assert not ApiToken.objects.filter(name="x").exists()


def test_the_tokens_page_shows_a_new_token_once(client, engineer_a):
    client.force_login(engineer_a)
    created = client.post("/account/tokens/", {"name": "laptop"})
    raw = created.context["new_token"]
    assert raw in created.content.decode()
    assert raw not in client.get("/account/tokens/").content.decode()
    token = ApiToken.objects.get(name="laptop")
    client.post(f"/account/tokens/{token.pk}/revoke/")
    token.refresh_from_db()
    assert token.revoked_at is not None
