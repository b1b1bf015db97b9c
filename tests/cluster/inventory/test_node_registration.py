import hashlib
import re
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from cluster.models import Node, NodeStatusPeriod

pytestmark = pytest.mark.django_db


def test_node_add_prints_the_token_once_and_the_agent_hash_line():
    out = StringIO()
    call_command("node_add", "gpu-new-01", "--url", "http://127.0.0.1:9499", "--pool", "train", "--label", "rack=r7", stdout=out)
    token = re.search(r"Agent token \(shown once\): (\S+)", out.getvalue()).group(1)
    assert f'token_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"' in out.getvalue()
    node = Node.objects.get(hostname="gpu-new-01")
    assert (node.agent_token, node.pool, node.labels) == (token, "train", {"rack": "r7"})
    assert NodeStatusPeriod.objects.filter(node=node, ended_at__isnull=True).count() == 1


def test_node_add_names_the_bad_field():
    with pytest.raises(CommandError, match="hostname: A hostname is dot-separated labels"):
        call_command("node_add", "bad host", "--url", "http://127.0.0.1:9499", stdout=StringIO())
    with pytest.raises(CommandError, match="agent_url: Enter a valid URL"):
        call_command("node_add", "ok-host", "--url", "not a url", stdout=StringIO())
    assert not Node.objects.exists()


def test_rotating_a_token_is_one_action_for_admins_only(api, admin_user, engineer_a, small_cluster):
    node = Node.objects.get(hostname="h200-a")
    old = node.agent_token
    assert api.as_user(engineer_a).post("/api/v1/nodes/h200-a/rotate-token/").status_code == 403
    response = api.as_user(admin_user).post("/api/v1/nodes/h200-a/rotate-token/")
    assert response.status_code == 200
    token = response.json()["token"]
    assert token != old
    assert response.json()["agent_config_line"] == f'token_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"'
    assert Node.objects.get(pk=node.pk).agent_token == token


def test_an_admin_status_change_is_recorded_in_the_history(api, admin_user, small_cluster):
    response = api.as_user(admin_user).patch("/api/v1/nodes/h200-a/", {"status": "maintenance"})
    assert response.status_code == 200
    periods = NodeStatusPeriod.objects.filter(node__hostname="h200-a")
    assert periods.get(ended_at__isnull=True).status == "maintenance"
    assert Node.objects.get(hostname="h200-a").status == "maintenance"
