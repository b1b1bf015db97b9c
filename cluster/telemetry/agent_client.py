"""HTTP client for a node agent's API (DESIGN.md §3). The server presents the node's token."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

NDJSON = "application/x-ndjson"
META_FIELDS = {"spool_id": str, "last_seq": int, "more": bool, "dropped_total": int, "count": int}


class AgentError(Exception):
    """Collection failed; ``kind`` says how the node's status should read."""

    kind = "unreachable"


class AgentUnreachable(AgentError):
    kind = "unreachable"


class AgentUnauthorized(AgentError):
    kind = "unauthorized"


class AgentProtocolError(AgentError):
    """The agent answered, but not in the documented shape: nothing of the answer is stored."""

    kind = "agent_error"


@dataclass(frozen=True)
class SamplesPage:
    """One ``/v1/samples`` page: the meta line's facts and the record lines, untouched, for COPY."""

    spool_id: str
    last_seq: int
    more: bool
    dropped_total: int
    count: int
    agent_time: float | None
    records: bytes


def fetch_samples(*, base_url: str, token: str, after: int, limit: int, timeout_s: float, spool_id: str = "") -> SamplesPage:
    """GET /v1/samples as NDJSON: a meta object on the first line, then one record per line.

    ``spool_id`` is the spool the cursor ``after`` belongs to: the agent acknowledges (and may prune)
    up to ``after`` only when it matches its own, so a stale cursor never deletes a new spool's data."""
    params = {"after": after, "limit": limit}
    if spool_id:
        params["spool_id"] = spool_id
    query = urllib.parse.urlencode(params)
    body, content_type = _get(f"{base_url.rstrip('/')}/v1/samples?{query}", token=token, accept=NDJSON, timeout_s=timeout_s)
    return parse_samples_page(body, content_type)


def parse_samples_page(body: bytes, content_type: str) -> SamplesPage:
    """Check an NDJSON page's meta line and line count; the record lines stay bytes, for COPY."""
    if not content_type.startswith(NDJSON):
        raise AgentProtocolError(f"/v1/samples answered {content_type or 'no content type'}, not {NDJSON}")
    head, _sep, records = body.partition(b"\n")
    try:
        meta = json.loads(head)
    except ValueError:
        raise AgentProtocolError("the first line of /v1/samples is not a JSON object") from None
    if not isinstance(meta, dict):
        raise AgentProtocolError("the first line of /v1/samples is not a JSON object")
    for name, kind in META_FIELDS.items():
        value = meta.get(name)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise AgentProtocolError(f"/v1/samples meta field {name!r} is missing or not a {kind.__name__}")
    if not meta["spool_id"]:
        raise AgentProtocolError("/v1/samples meta field 'spool_id' is empty")
    lines = records.count(b"\n")
    if lines != meta["count"] or (records and not records.endswith(b"\n")):
        raise AgentProtocolError(f"/v1/samples announced {meta['count']} records but sent {lines} lines (truncated?)")
    agent_time = meta.get("agent_time")
    return SamplesPage(
        spool_id=meta["spool_id"], last_seq=meta["last_seq"], more=meta["more"], dropped_total=meta["dropped_total"],
        count=meta["count"], agent_time=float(agent_time) if isinstance(agent_time, int | float) else None,
        records=records,
    )


def fetch_inventory(*, base_url: str, token: str, timeout_s: float) -> dict:
    body, _content_type = _get(f"{base_url.rstrip('/')}/v1/inventory", token=token, accept="application/json", timeout_s=timeout_s)
    try:
        inventory = json.loads(body)
    except ValueError:
        raise AgentProtocolError("/v1/inventory is not JSON") from None
    if not isinstance(inventory, dict) or not isinstance(inventory.get("gpus"), list):
        raise AgentProtocolError("/v1/inventory has no 'gpus' list")
    return inventory


def _get(url: str, *, token: str, accept: str, timeout_s: float) -> tuple[bytes, str]:
    if not url.startswith(("http://", "https://")):
        raise AgentUnreachable(f"agent URL {url!r} is not http(s)")
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}", "Accept": accept})  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (http(s) checked above)
            return response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as error:
        if error.code in (401, 403):
            raise AgentUnauthorized(f"the agent refused the node token (HTTP {error.code})") from None
        raise AgentProtocolError(f"the agent answered HTTP {error.code}: {error.read(200).decode(errors='replace')}") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise AgentUnreachable(f"cannot reach the agent at {url.split('?')[0]}: {reason}") from None
