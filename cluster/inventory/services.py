"""Writes to the inventory: registering a node and its agent token."""

from __future__ import annotations

import hashlib
import secrets

from django.db import transaction

from cluster.models import Node
from cluster.status.services import node_status_set


def new_agent_token() -> str:
    return secrets.token_urlsafe(32)

def agent_config_line(token: str) -> str:
    """The line for the agent's config: the agent keeps only the token's SHA-256."""
    return f'token_sha256 = "{hashlib.sha256(token.encode()).hexdigest()}"'

@transaction.atomic
def node_register(*, hostname: str, agent_url: str, pool: str = "default", labels: dict | None = None) -> tuple[Node, str]:
    """Add a node and issue its agent token (shown once to the admin, kept encrypted by the server)."""
    token = new_agent_token()
    node = Node(hostname=hostname, agent_url=agent_url, pool=pool, labels=labels or {}, agent_token=token)
    node.full_clean()
    node.save()
    node_status_set(node=node, status=node.status, reason="registered")
    return node, token

@transaction.atomic
def node_token_rotate(*, node: Node) -> str:
    """Replace the node's agent token; the agent needs the new hash line before the next collection."""
    token = new_agent_token()
    node.agent_token = token
    node.save(update_fields=["agent_token"])
    return token
