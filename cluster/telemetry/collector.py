"""Collection: pull each node's agent after the stored cursor and store the records (DESIGN.md §3).

Per page, one transaction holds the node's ``CollectionState`` row lock (a second collection of the
same node at the same moment skips instead of waiting), fetches, stores through ``cluster.telemetry.ingest`` and
advances the cursor; a failure rolls all of it back and is then recorded on its own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import psycopg
from django.conf import settings
from django.db import DataError, transaction
from django.utils import timezone
from django.utils.translation import gettext, ngettext

from cluster.choices import AlertKind, AlertSubject, AlertTier, NodeStatus
from cluster.inventory.sync import inventory_apply
from cluster.models import CollectionState, Gpu, Node
from cluster.status.services import alert_close, alert_raise, node_alert_raise, node_status_set
from cluster.telemetry import agent_client
from cluster.telemetry.agent_client import AgentError, AgentProtocolError
from cluster.telemetry.ingest import IngestResult, ingest_json_lines
from cluster.telemetry.models import clock_skewed
from core.languages import in_every_language

log = logging.getLogger(__name__)

INVENTORY_REFRESH = timedelta(minutes=15)
FAILURE_STATUS = {
    "unauthorized": (NodeStatus.UNAUTHORIZED, AlertKind.NODE_UNAUTHORIZED, AlertTier.WARNING),
    "agent_error": (NodeStatus.AGENT_ERROR, AlertKind.AGENT_ERROR, AlertTier.WARNING),
    "unreachable": (NodeStatus.UNREACHABLE, AlertKind.NODE_UNREACHABLE, AlertTier.CRITICAL),
}

FAILURE_ALERT_KINDS = tuple(kind for _status, kind, _tier in FAILURE_STATUS.values())


@dataclass
class CollectOutcome:
    node: str
    pages: int = 0
    stored: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    skipped: bool = False
    error: str = ""
    clock_skew_s: float | None = None  # the agent's clock minus the server's, at its last answer


def collect_node(*, node_id: int, now: datetime | None = None, max_pages: int = 50, fetch=None) -> CollectOutcome:
    """Collect one node until its agent has nothing more (or ``max_pages``). Safe to run twice at once."""
    node = Node.objects.get(pk=node_id)
    outcome = CollectOutcome(node=node.hostname)
    state, _created = CollectionState.objects.get_or_create(node=node)
    fetch = fetch or agent_client.fetch_samples
    try:
        _refresh_inventory_if_due(node, state, now=now or timezone.now())
        for _page in range(max_pages):
            more = _collect_page(node, outcome, fetch=fetch, now=now or timezone.now())
            if outcome.skipped or not more:
                break
    except AgentError as error:
        outcome.error = str(error)
        _record_failure(node, error, now=now or timezone.now())
        return outcome
    if outcome.pages:
        _record_success(node, clock_skew_s=outcome.clock_skew_s, now=now or timezone.now())
    return outcome


def _collect_page(node: Node, outcome: CollectOutcome, *, fetch, now: datetime) -> bool:
    with transaction.atomic():
        state = CollectionState.objects.select_for_update(skip_locked=True).filter(node=node).first()
        if state is None:
            outcome.skipped = True  # another worker is collecting this node right now
            return False
        page = _fetch(node, state, fetch, after=state.cursor, spool_id=state.spool_id)
        if state.spool_id and page.spool_id != state.spool_id:
            # The agent's spool was created afresh: its seqs start again, so does our cursor.
            log.warning("%s: new spool %s (was %s); cursor restarts at 0", node, page.spool_id, state.spool_id)
            # The first answer acknowledged nothing there: the agent prunes only when the spool_id we
            # send matches its own (docs/decisions.md).
            state.cursor = 0
            page = _fetch(node, state, fetch, after=0, spool_id=page.spool_id)
        result = _ingest(node, page, now=now)
        _advance(state, page, result, now=now)
        _raise_gpu_error_alerts(node, result, now=now)
    outcome.pages += 1
    outcome.clock_skew_s = state.clock_skew_s
    outcome.stored += result.stored
    for reason, count in result.rejected.items():
        outcome.rejected[reason] = outcome.rejected.get(reason, 0) + count
    return page.more


def _fetch(node: Node, state: CollectionState, fetch, *, after: int, spool_id: str):
    return fetch(
        base_url=node.agent_url, token=node.agent_token, after=after, spool_id=spool_id,
        limit=settings.TELEMETRY_FETCH_LIMIT, timeout_s=settings.TELEMETRY_FETCH_TIMEOUT_S,
    )


def _ingest(node: Node, page, *, now: datetime) -> IngestResult:
    if not page.records:
        return IngestResult()
    try:
        with transaction.atomic():
            result = ingest_json_lines(
                page.records, node_id=node.pk, now=now,
                max_future_s=settings.TELEMETRY_MAX_FUTURE_S, max_age_s=settings.TELEMETRY_MAX_AGE_S,
            )
    except (DataError, psycopg.DataError) as error:
        raise AgentProtocolError(f"a record line is not JSON: {str(error).splitlines()[0]}") from None
    if result.seen and result.max_seq is None:
        raise AgentProtocolError("records carry no 'seq'")
    if result.seen != page.count:
        raise AgentProtocolError(f"announced {page.count} records, {result.seen} arrived")
    return result


def _advance(state: CollectionState, page, result: IngestResult, *, now: datetime) -> None:
    state.spool_id = page.spool_id
    if result.max_seq is not None:
        state.cursor = max(state.cursor, result.max_seq)
    state.last_attempt_at = state.last_success_at = now
    state.records_stored += result.stored
    state.records_rejected += result.rejected_total
    rejected = dict(state.rejected_by_reason)
    for reason, count in result.rejected.items():
        rejected[reason] = rejected.get(reason, 0) + count
    state.rejected_by_reason = rejected
    state.agent_dropped_total = page.dropped_total
    if result.newest_ts is not None:
        newest = datetime.fromtimestamp(result.newest_ts, UTC)
        if state.data_complete_to is None or newest > state.data_complete_to:
            state.data_complete_to = newest
    if state.data_complete_to is not None:
        state.lag_s = (now - state.data_complete_to).total_seconds()
    if page.agent_time is not None:
        state.clock_skew_s = round(page.agent_time - now.timestamp(), 3)
    state.consecutive_failures = 0
    state.last_error = ""
    state.save()


def _refresh_inventory_if_due(node: Node, state: CollectionState, *, now: datetime) -> None:
    if state.inventory_refreshed_at and now - state.inventory_refreshed_at < INVENTORY_REFRESH:
        return
    inventory = agent_client.fetch_inventory(
        base_url=node.agent_url, token=node.agent_token, timeout_s=settings.TELEMETRY_FETCH_TIMEOUT_S
    )
    inventory_apply(node, inventory)
    CollectionState.objects.filter(node=node).update(
        inventory_refreshed_at=now,
        agent_version=str(inventory.get("agent_version") or "")[:32],
        driver_version=str(inventory.get("driver_version") or "")[:32],
    )


def _clock_text(skew_s: float) -> str:
    if skew_s > 0:
        return gettext(
            "The agent's clock is %(seconds)d s ahead of the server's: its records more than %(limit)d s ahead "
            "are refused and counted as rejected."
        ) % {"seconds": round(skew_s), "limit": settings.TELEMETRY_MAX_FUTURE_S}
    return gettext(
        "The agent's clock is %(seconds)d s behind the server's: its records are stored at the times it wrote, "
        "which are that much early."
    ) % {"seconds": round(-skew_s)}


def _raise_clock_skew(node: Node, skew_s: float, *, now: datetime) -> None:
    """Flag a node whose agent's clock is off by more than TELEMETRY_MAX_CLOCK_SKEW_S: a warning, refreshed on
    each collection while it lasts, closed by the first collection with the clock back within it."""
    alert_raise(
        subject_type=AlertSubject.NODE, subject_id=node.pk, subject_label=node.hostname,
        kind=AlertKind.NODE_CLOCK_SKEW, tier=AlertTier.WARNING,
        message=in_every_language(lambda: _clock_text(skew_s)),
        details={"clock_skew_s": skew_s, "limit_s": settings.TELEMETRY_MAX_CLOCK_SKEW_S}, at=now,
    )


def _record_success(node: Node, *, clock_skew_s: float | None = None, now: datetime) -> None:
    node.refresh_from_db(fields=["status"])
    Node.objects.filter(pk=node.pk).update(last_seen_at=now)
    if node.status not in NodeStatus.set_by_admins() and node.status != NodeStatus.UP:
        node_status_set(node=node, status=NodeStatus.UP, at=now, reason="collected")
    skewed = clock_skewed(clock_skew_s)
    closed = FAILURE_ALERT_KINDS if skewed or clock_skew_s is None else (*FAILURE_ALERT_KINDS, AlertKind.NODE_CLOCK_SKEW)
    # One statement for the kinds: this runs after every successful collection of every node.
    alert_close(subject_type=AlertSubject.NODE, subject_id=node.pk, kinds=closed, at=now)
    if skewed:
        _raise_clock_skew(node, clock_skew_s, now=now)


def _record_failure(node: Node, error: AgentError, *, now: datetime) -> None:
    with transaction.atomic():
        state = CollectionState.objects.select_for_update().get(node=node)
        state.consecutive_failures += 1
        state.last_attempt_at = now
        state.last_error = str(error)[:2000]
        state.save(update_fields=["consecutive_failures", "last_attempt_at", "last_error"])
    log.warning("%s: collection failed (%s): %s", node, error.kind, error)
    node.refresh_from_db(fields=["status"])
    if node.status in NodeStatus.set_by_admins():
        return
    status, kind, tier = FAILURE_STATUS[error.kind]
    # Unauthorized and malformed answers are certain at once; silence may be a blip, so wait for a few.
    if error.kind == "unreachable" and state.consecutive_failures < settings.TELEMETRY_UNREACHABLE_AFTER:
        return
    node_status_set(node=node, status=status, at=now, reason=str(error)[:500])
    node_alert_raise(node, kind=kind, tier=tier, message=str(error)[:500], at=now)


def _xid_text(count: int, gpu: Gpu) -> str:
    return ngettext("%(n)d new XID error on %(gpu)s", "%(n)d new XID errors on %(gpu)s", count) % {
        "n": count, "gpu": gpu}


def _ecc_text(count: int, gpu: Gpu) -> str:
    return ngettext("%(n)d new double-bit ECC error on %(gpu)s", "%(n)d new double-bit ECC errors on %(gpu)s",
                    count) % {"n": count, "gpu": gpu}


def _raise_gpu_error_alerts(node: Node, result: IngestResult, *, now: datetime) -> None:
    if not result.gpu_errors:
        return
    gpus = Gpu.objects.in_bulk(list(result.gpu_errors))
    for gpu_id, (xid, ecc) in result.gpu_errors.items():
        gpu = gpus[gpu_id]
        for count, kind, text in ((xid, AlertKind.GPU_XID, _xid_text), (ecc, AlertKind.GPU_ECC_DBE, _ecc_text)):
            if count:
                alert_raise(
                    subject_type=AlertSubject.GPU, subject_id=gpu_id, subject_label=str(gpu), kind=kind,
                    tier=AlertTier.CRITICAL,
                    message=in_every_language(lambda text=text, count=count, gpu=gpu: text(count, gpu)),
                    details={"node": node.hostname, "uuid": gpu.uuid}, at=now,
                )


def close_quiet_gpu_alerts(*, now: datetime | None = None) -> int:
    """Close XID/ECC episodes with no new event for TELEMETRY_ERROR_QUIET_S: the next event opens a new one."""
    from cluster.models import Alert

    now = now or timezone.now()
    quiet_since = now - timedelta(seconds=settings.TELEMETRY_ERROR_QUIET_S)
    return (
        Alert.objects.open()
        .filter(kind__in=[AlertKind.GPU_XID, AlertKind.GPU_ECC_DBE], last_seen_at__lt=quiet_since)
        .update(closed_at=now)
    )
