"""Writes to the inventory: registering a node and its agent token. Every change of a node's token is
audited (teams.audit) as what happened to it (issued, rotated, replaced, removed), never its value."""

from __future__ import annotations

import hashlib
import secrets

from django.db import transaction

from cluster.models import Node
from cluster.status.services import node_status_set
from teams.audit.models import AuditKind
from teams.audit.records import audit_record


def new_agent_token() -> str:
    return secrets.token_urlsafe(32)

def agent_config_line(token: str) -> str:
    """The line for the agent's config: the agent keeps only the token's SHA-256."""
    return f'token_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"'

def node_token_record(*, user, node: Node, before: str, how: str | None = None) -> None:
    """Record what happened to ``node``'s token (its value before was ``before``): issued, rotated,
    replaced or removed. Nothing when it did not change. Call inside the change's transaction."""
    after = node.agent_token or ""
    if after == (before or "") and how is None:
        return
    if how is None:
        how = "issued" if not before else "removed" if not after else "replaced"
    audit_record(kind=AuditKind.NODE_TOKEN, user=user, object_id=node.pk, subject=f"agent token of {node.hostname}",
                 before={"hostname": node.hostname, "agent_token": "set" if before else "none"},
                 after={"hostname": node.hostname, "agent_token": how})


@transaction.atomic
def node_register(*, hostname: str, agent_url: str, pool: str = "default", labels: dict | None = None,
                  user=None) -> tuple[Node, str]:
    """Add a node and issue its agent token (shown once to the admin, kept encrypted by the server)."""
    token = new_agent_token()
    node = Node(hostname=hostname, agent_url=agent_url, pool=pool, labels=labels or {}, agent_token=token)
    node.full_clean()
    node.save()
    node_status_set(node=node, status=node.status, reason="registered")
    node_token_record(user=user, node=node, before="")
    return node, token

@transaction.atomic
def node_token_rotate(*, node: Node, user=None) -> str:
    """Replace the node's agent token; the agent needs the new hash line before the next collection."""
    before = Node.objects.select_for_update().values_list("agent_token", flat=True).get(pk=node.pk)
    token = new_agent_token()
    node.agent_token = token
    node.save(update_fields=["agent_token"])
    node_token_record(user=user, node=node, before=before, how="rotated")
    return token

@transaction.atomic
def node_token_set(*, node: Node, token: str, user=None) -> None:
    """Give ``node`` the agent token ``token`` (one the agent already has, e.g. the demo fleet's)."""
    before = Node.objects.select_for_update().values_list("agent_token", flat=True).get(pk=node.pk)
    node.agent_token = token
    node.save(update_fields=["agent_token"])
    node_token_record(user=user, node=node, before=before)
