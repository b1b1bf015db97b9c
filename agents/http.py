"""The agent's HTTP endpoint (DESIGN.md §3), on the standard library's ThreadingHTTPServer.

- ``GET /healthz``: ``{"ok": true}`` to anyone (a load balancer's or systemd's probe), 503 with
  ``"ok": false`` when the sampler has stopped; with the bearer token, also ``"agent_version", "backend",
  "spool_id", "last_seq", "last_record_ts", "agent_time"`` (what a stranger should not learn).
- ``GET /v1/inventory``: the backend's inventory (agents/records.py).
- ``GET /v1/samples?after=<seq>&limit=<n>``: ``{"spool_id", "records": [{"seq", …record}],
  "last_seq", "more", "dropped_total", "agent_time"}``. ``after`` (default 0) acknowledges every
  record up to it (the spool may prune them); ``limit`` defaults to 1000 and is capped at 20000.
  ``last_seq`` is the seq of the page's last record, or ``after`` when the page is empty.
  With ``Accept: application/x-ndjson`` (what the server's collector asks for) the same page comes as
  newline-delimited JSON: a meta line ``{"spool_id", "last_seq", "more", "dropped_total",
  "agent_time", "count"}`` then ``count`` record lines, so the server can ``COPY`` the lines without
  parsing them in Python. ``spool_id=<id>`` makes the acknowledgement conditional: the agent prunes
  up to ``after`` only when ``id`` is its own spool's (a cursor of an older spool acknowledges nothing).
- ``GET /metrics``: Prometheus text (agents/metrics.py).

All but /healthz need ``Authorization: Bearer <token>``; the agent holds only the token's SHA-256.
Errors are JSON ``{"error", "detail"}`` (plus ``"parameter"`` for a bad query parameter).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import selectors
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import agents
from agents.spool import Spool

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 1000
MAX_LIMIT = 20_000
_MAX_SEQ = 2**63 - 1
_DIGITS = re.compile(r"\d{1,19}")
_AUTH_LOG_EVERY_S = 60.0


class AgentView(Protocol):
    """What the endpoint needs from the running agent (agents/agent.py's Agent)."""

    token_sha256: str
    spool: Spool

    def agent_time(self) -> float: ...
    def health(self) -> tuple[bool, dict[str, Any]]: ...
    def inventory(self) -> dict[str, Any]: ...
    def metrics_text(self) -> str: ...


def _json_bytes(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


NDJSON = "application/x-ndjson"


def samples_body(
    spool: Spool, *, after: int, limit: int, agent_time: float, ndjson: bool = False, spool_id: str | None = None
) -> bytes:
    """The /v1/samples body. Records are spliced from the spool's stored JSON (``{"seq":N,`` + the
    stored object minus its ``{``) instead of decoded and re-encoded: a 20,000-record page is a
    string join, milliseconds, not a second of json work."""
    if spool_id is None or spool_id == spool.spool_id:
        spool.ack(after)
    rows, last_seq, more = spool.read_raw(after, limit)
    dropped = spool.stats()["dropped_total"]
    if ndjson:
        meta = {
            "spool_id": spool.spool_id, "last_seq": last_seq, "more": more, "dropped_total": dropped,
            "agent_time": agent_time, "count": len(rows),
        }
        lines = [_json_bytes(meta).decode(), *(f'{{"seq":{seq},{body[1:]}' for seq, body in rows)]
        return ("\n".join(lines) + "\n").encode()
    parts = [
        '{"spool_id":', json.dumps(spool.spool_id), ',"records":[',
        ",".join([f'{{"seq":{seq},{body[1:]}' for seq, body in rows]),
        f'],"last_seq":{last_seq},"more":{"true" if more else "false"},"dropped_total":{dropped},'
        f'"agent_time":{agent_time!r}}}',
    ]
    return "".join(parts).encode()


class _AuthLog:
    """Logs a rejected request at most once a minute per client address, so a misconfigured
    collector polling every few seconds does not flood the journal."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}

    def should_log(self, address: str) -> bool:
        now = time.monotonic()
        with self._lock:
            if len(self._last) > 10_000:  # many addresses: forget the old ones
                self._last = {a: t for a, t in self._last.items() if now - t < _AUTH_LOG_EVERY_S}
            if now - self._last.get(address, -_AUTH_LOG_EVERY_S) < _AUTH_LOG_EVERY_S:
                return False
            self._last[address] = now
            return True


class AgentHandler(BaseHTTPRequestHandler):
    """One request. ``agent`` and ``auth_log`` are set on a per-server subclass (make_server)."""

    agent: AgentView
    auth_log: _AuthLog
    protocol_version = "HTTP/1.1"  # keep-alive: a collector fetching many pages reuses its connection
    server_version = f"cardhour-agent/{agents.__version__}"
    timeout = 30  # an idle keep-alive connection frees its thread after this

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path == "/healthz":
            ok, body = self.agent.health()
            return self._send(200 if ok else 503, _json_bytes(body if self._token_ok() else {"ok": ok}))
        if url.path not in ("/v1/samples", "/v1/inventory", "/metrics"):
            return self._error(404, "not_found", f"no such endpoint: {url.path}")
        if not self._authorized():
            return None
        if url.path == "/v1/inventory":
            return self._send(200, _json_bytes(self.agent.inventory()))
        if url.path == "/metrics":
            return self._send(200, self.agent.metrics_text().encode(), "text/plain; version=0.0.4; charset=utf-8")
        return self._samples(parse_qs(url.query, keep_blank_values=True))

    def _not_allowed(self) -> None:
        self.close_connection = True  # a body we do not read must not be taken for the next request
        self._error(405, "method_not_allowed", "only GET is supported", {"Allow": "GET"})

    do_POST = do_PUT = do_PATCH = do_DELETE = _not_allowed

    def _samples(self, query: dict[str, list[str]]) -> None:
        after = self._int_param(query, "after", 0, "a non-negative integer (a spool seq)")
        if after is None:
            return
        limit = self._int_param(query, "limit", DEFAULT_LIMIT, f"an integer from 1 (capped at {MAX_LIMIT})", low=1)
        if limit is None:
            return
        ndjson = NDJSON in (self.headers.get("Accept") or "")
        spool_id = (query.get("spool_id") or [None])[-1] or None
        body = samples_body(
            self.agent.spool, after=after, limit=min(limit, MAX_LIMIT), agent_time=self.agent.agent_time(),
            ndjson=ndjson, spool_id=spool_id,
        )
        self._send(200, body, NDJSON if ndjson else "application/json")

    def _int_param(self, query: dict[str, list[str]], name: str, default: int, rule: str, low: int = 0) -> int | None:
        values = query.get(name)
        if values is None:
            return default
        text = values[-1].strip()
        if len(values) == 1 and _DIGITS.fullmatch(text) and low <= int(text) <= _MAX_SEQ:
            return int(text)
        self._error(400, "bad_request", f"{name}: must be {rule} (got {values[-1]!r})", parameter=name)
        return None

    def _token_ok(self) -> bool:
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        presented = hashlib.sha256(token.strip().encode()).hexdigest()
        return scheme.lower() == "bearer" and bool(token.strip()) and hmac.compare_digest(presented, self.agent.token_sha256)

    def _authorized(self) -> bool:
        if self._token_ok():
            return True
        scheme, _, token = self.headers.get("Authorization", "").partition(" ")
        address = self.client_address[0]
        if self.auth_log.should_log(address):
            reason = "no bearer token" if scheme.lower() != "bearer" or not token.strip() else "wrong token"
            log.warning("rejected %s %s from %s: %s (logged once a minute per address)", self.command,
                        self.path.split("?")[0], address, reason)
        self._error(401, "unauthorized", "a valid bearer token is required", {"WWW-Authenticate": "Bearer"})
        return False

    def _error(self, status: int, error: str, detail: str, headers: dict[str, str] | None = None, **extra: Any) -> None:
        self._send(status, _json_bytes({"error": error, "detail": detail, **extra}), headers=headers)

    def _send(self, status: int, body: bytes, content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.client_address[0], *args)


class AgentServer(ThreadingHTTPServer):
    """Threads are daemons, so a stuck client cannot hold up the agent's exit."""

    daemon_threads = True
    allow_reuse_address = True


def serve_all(servers: list[AgentServer], stop: threading.Event, *, poll_interval: float = 0.5) -> None:
    """Serve several agents' servers from one thread until ``stop`` is set: what ``serve_forever`` does for
    one server, over all their sockets at once (a fleet of simulated nodes, ``agents/fleet.py``). Each server
    still hands every request to a thread of its own; only the waiting is shared, so 1,250 nodes are one
    thread that wakes when a request comes, not 1,250 that each wake five times a second."""
    with selectors.DefaultSelector() as selector:
        for server in servers:
            selector.register(server, selectors.EVENT_READ, server)
        while not stop.is_set():
            for key, _events in selector.select(poll_interval):
                key.data._handle_request_noblock()  # accept and dispatch, as serve_forever does


def make_server(agent: AgentView, host: str, port: int) -> AgentServer:
    """Bind (raises OSError if the address is taken) and return the server; ``serve_forever`` it in a
    thread. IPv6 hosts (``::1``) get an IPv6 socket."""
    handler = type("BoundAgentHandler", (AgentHandler,), {"agent": agent, "auth_log": _AuthLog()})
    server_class = AgentServer
    if ":" in host:
        server_class = type("AgentServer6", (AgentServer,), {"address_family": socket.AF_INET6})
    return server_class((host, port), handler)
