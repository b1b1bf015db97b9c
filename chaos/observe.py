"""What the scenarios read: the agents' spools (through their HTTP API), the database's rows in one
statement, the pages while a fault lasts, and the backends waiting on a lock the harness holds."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import requests

from chaos.verdicts import GpuSpan, NodeCount, Probe

# What a reader opens: the daily board, the inventory, the jobs; and the API's node and GPU lists.
PAGES = ("/", "/inventory/", "/jobs/")
API = ("/api/v1/nodes/", "/api/v1/gpus/")


def agent_last_seqs(tokens: dict[str, dict]) -> dict[str, int]:
    """Each agent's last spooled seq (``/healthz`` with the node's token): the records it has produced."""
    seqs = {}
    for hostname, entry in tokens.items():
        answer = requests.get(f"{entry['url']}/healthz", headers={"Authorization": f"Bearer {entry['token']}"}, timeout=5)
        answer.raise_for_status()
        seqs[hostname] = int(answer.json()["last_seq"])
    return seqs


def node_counts(produced: dict[str, int]) -> list[NodeCount]:
    """The collector's side of each node in ``produced``, read in one statement (one snapshot: the
    collector stores rows and cursor in one transaction)."""
    from django.db import connection

    from cluster.models import CollectionState, Gpu, Node, Sample

    sql = f"""
        SELECT n.hostname, coalesce(c.cursor, 0), coalesce(c.records_rejected, 0), coalesce(c.agent_dropped_total, 0),
               (SELECT count(*) FROM {Sample._meta.db_table} s JOIN {Gpu._meta.db_table} g ON g.id = s.gpu_id
                 WHERE g.node_id = n.id),
               (SELECT count(DISTINCT (s.gpu_id, s.ts)) FROM {Sample._meta.db_table} s
                 JOIN {Gpu._meta.db_table} g ON g.id = s.gpu_id WHERE g.node_id = n.id)
          FROM {Node._meta.db_table} n LEFT JOIN {CollectionState._meta.db_table} c ON c.node_id = n.id
         WHERE n.hostname = ANY(%s)
    """  # noqa: S608 (table names from the models)
    with connection.cursor() as cursor:
        cursor.execute(sql, [list(produced)])
        rows = cursor.fetchall()
    return [NodeCount(node=host, produced=produced[host], cursor=cursor_, stored=stored, distinct=distinct,
                      rejected=rejected, dropped=dropped)
            for host, cursor_, rejected, dropped, stored, distinct in sorted(rows)]


def gpu_spans(hostnames) -> list[GpuSpan]:
    from django.db.models import Count, Max, Min

    from cluster.models import Sample

    rows = (Sample.objects.filter(gpu__node__hostname__in=list(hostnames))
            .values("gpu__uuid", "interval_s").annotate(n=Count("ts"), first=Min("ts"), last=Max("ts")))
    return [GpuSpan(gpu=r["gpu__uuid"], count=r["n"], first_ts=r["first"].timestamp(), last_ts=r["last"].timestamp(),
                    interval_s=r["interval_s"]) for r in rows]


def collected_up_to(produced: dict[str, int]) -> bool:
    """Every node's cursor has reached the seq its agent had produced."""
    from cluster.models import CollectionState

    cursors = dict(CollectionState.objects.filter(node__hostname__in=list(produced)).values_list("node__hostname", "cursor"))
    return all(cursors.get(host, 0) >= seq for host, seq in produced.items())


def page_session(browser) -> requests.Session:
    """A signed-in session whose every request opens its own connection. Reusing one races gunicorn's
    2 s keep-alive: a request sent every 2 s can meet the server closing the idle connection and fail
    with a ConnectionError that says nothing of the server (a browser retries such a request itself)."""
    session = requests.Session()
    session.cookies.set("sessionid", browser.session_cookie)
    session.headers["Connection"] = "close"
    return session


class Prober:
    """Requests the pages and the API every ``every_s`` in a thread, keeping each answer as a Probe."""

    def __init__(self, base_url: str, browser, *, every_s: float = 2.0) -> None:
        self.base_url, self.browser, self.every_s = base_url, browser, every_s
        self.pages: list[Probe] = []
        self.api: list[Probe] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        session = page_session(self.browser)
        api_headers = {"Authorization": f"Bearer {self.browser.api_token}"}
        while not self._stop.is_set():
            for path in PAGES:
                self.pages.append(self._get(session, path, {}))
            for path in API:
                self.api.append(self._get(requests, path, api_headers))
            self._stop.wait(self.every_s)

    def _get(self, client, path: str, headers: dict) -> Probe:
        url = self.base_url + path
        try:
            answer = client.get(url, headers=headers, timeout=15, allow_redirects=False)
        except requests.RequestException as error:  # kept, so that a verdict says timed out or refused
            return Probe(url=path, status=0, body=type(error).__name__)
        return Probe(url=path, status=answer.status_code, content_type=answer.headers.get("Content-Type", ""),
                     body=answer.text[:200_000])


def probe_once(base_url: str, browser) -> list[Probe]:
    """One round of the prober's requests (before a fault: the pages must answer 200 to begin with)."""
    prober = Prober(base_url, browser)
    session = page_session(browser)
    return ([prober._get(session, path, {}) for path in PAGES]
            + [prober._get(requests, path, {"Authorization": f"Bearer {browser.api_token}"}) for path in API])


@contextmanager
def table_locked(model, mode: str = "SHARE"):
    """Hold ``LOCK TABLE <model's table> IN <mode> MODE`` on a connection of its own until the block ends:
    a task that writes the table waits there, in the middle of its transaction. Yields the lock holder's
    backend pid."""
    import psycopg
    from django.db import connection

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params) as holder:
        holder.execute(f'LOCK TABLE "{model._meta.db_table}" IN {mode} MODE')
        try:
            yield holder.info.backend_pid
        finally:
            holder.rollback()


def backends_blocked_by(pid: int) -> list[tuple[int, str]]:
    """(backend pid, its query) of every backend waiting on the lock that backend ``pid`` holds."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pid, left(query, 200) FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [pid])
        return cursor.fetchall()


def backend_alive(pid: int) -> bool:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [pid])
        return cursor.fetchone()[0] == 1


def wait_for(condition, *, timeout_s: float, every_s: float = 0.5):
    """Poll ``condition`` until it returns something true (returned) or ``timeout_s`` passes (None).
    A database error while polling (a server coming back) counts as not yet."""
    from django.db import DatabaseError, connections

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = condition()
        except DatabaseError:
            connections.close_all()
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            return None
        time.sleep(every_s)
