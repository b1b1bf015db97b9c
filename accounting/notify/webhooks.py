"""Posting alerts to webhook endpoints (DESIGN.md §6): a generic JSON body, or DingTalk- and Feishu-style
robot messages signed the way those robots check. Only workers post (the ``deliver_webhook`` task); a
failed post is retried with backoff by the task, a delivery left pending (never enqueued, retries lost) is
posted by the sweeper (``webhook_sweep``), and two workers never post one delivery twice."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timedelta

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounting.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint, WebhookPreset
from cluster.models import Alert


class WebhookError(Exception):
    """A post that did not get a 2xx answer (or no answer)."""


class DeliveryRetry(Exception):
    """The post failed and may be tried again later."""


def alert_payload(alert: Alert) -> dict:
    """The alert as plain JSON data."""
    return {
        "id": alert.pk, "subject_type": alert.subject_type, "subject_id": alert.subject_id,
        "subject": alert.subject_label, "kind": alert.kind, "kind_label": str(alert.get_kind_display()),
        "tier": alert.tier, "message": alert.message, "details": alert.details,
        "opened_at": alert.opened_at.isoformat(), "closed_at": alert.closed_at.isoformat() if alert.closed_at else None,
    }


def alert_text(alert: Alert) -> str:
    return f"[Cardhour] {alert.get_tier_display()}: {alert.get_kind_display()} · {alert.subject_label}\n{alert.message}"


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    """DingTalk robots: base64(HMAC-SHA256(key=secret, msg=f"{timestamp}\\n{secret}")), URL-encoded."""
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return urllib.parse.quote_plus(base64.b64encode(digest).decode())


def feishu_sign(secret: str, timestamp_s: int) -> str:
    """Feishu bots: base64(HMAC-SHA256(key=f"{timestamp}\\n{secret}", msg=empty))."""
    digest = hmac.new(f"{timestamp_s}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def generic_signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def webhook_request(endpoint: WebhookEndpoint, alert: Alert, *, clock: float | None = None) -> urllib.request.Request:
    """The POST for ``alert`` in the endpoint's preset shape, signed when it has a secret."""
    clock = time.time() if clock is None else clock
    url, headers = endpoint.url, {"Content-Type": "application/json; charset=utf-8", "User-Agent": "Cardhour"}
    if endpoint.preset == WebhookPreset.DINGTALK:
        body = {"msgtype": "text", "text": {"content": alert_text(alert)}}
        if endpoint.secret:
            timestamp = int(clock * 1000)
            joiner = "&" if urllib.parse.urlsplit(url).query else "?"
            url = f"{url}{joiner}timestamp={timestamp}&sign={dingtalk_sign(endpoint.secret, timestamp)}"
    elif endpoint.preset == WebhookPreset.FEISHU:
        body = {"msg_type": "text", "content": {"text": alert_text(alert)}}
        if endpoint.secret:
            timestamp = int(clock)
            body = {"timestamp": str(timestamp), "sign": feishu_sign(endpoint.secret, timestamp), **body}
    else:
        body = {"alert": alert_payload(alert)}
    data = json.dumps(body, ensure_ascii=False).encode()
    if endpoint.preset == WebhookPreset.GENERIC and endpoint.secret:
        headers["X-Cardhour-Signature"] = generic_signature(endpoint.secret, data)
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise WebhookError(f"not an http(s) URL: {url[:100]}")
    return urllib.request.Request(url, data=data, headers=headers, method="POST")  # noqa: S310 (scheme checked)


def webhook_post(endpoint: WebhookEndpoint, alert: Alert) -> None:
    """Post once; raise :class:`WebhookError` unless the answer is 2xx."""
    request = webhook_request(endpoint, alert)
    try:
        with urllib.request.urlopen(request, timeout=settings.NOTIFY_WEBHOOK_TIMEOUT_S) as response:  # noqa: S310
            status = response.status
    except urllib.error.HTTPError as error:
        raise WebhookError(f"HTTP {error.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise WebhookError(str(getattr(error, "reason", error))[:500]) from None
    if not 200 <= status < 300:
        raise WebhookError(f"HTTP {status}")


BUSY = "busy"  # webhook_deliver's answer when another worker holds the delivery


def webhook_deliver(*, delivery_id: int, now: datetime | None = None) -> str:
    """Try ``delivery_id`` once unless it is already sent or given up. Returns its status, or :data:`BUSY`
    when another worker is posting it right now; raises :class:`DeliveryRetry` when the post failed and
    attempts are left (the caller schedules the retry)."""
    now = now or timezone.now()
    with transaction.atomic():
        # The claim: the row stays locked while it is posted, and a second worker (the sweeper and a late
        # original task) skips it instead of waiting, then finds it sent. A worker killed mid-post rolls the
        # claim back, so the delivery is pending again and is retried (posted at least once, never twice by
        # two live workers).
        delivery = WebhookDelivery.objects.select_for_update(skip_locked=True).filter(pk=delivery_id).first()
        if delivery is None:
            if WebhookDelivery.objects.filter(pk=delivery_id).exists():
                return BUSY
            raise WebhookDelivery.DoesNotExist(f"webhook delivery {delivery_id}")
        if delivery.status != DeliveryStatus.PENDING:
            return delivery.status
        endpoint = WebhookEndpoint.objects.get(pk=delivery.endpoint_id)
        alert = Alert.objects.get(pk=delivery.alert_id)
        delivery.attempts += 1
        try:
            webhook_post(endpoint, alert)
        except WebhookError as error:
            delivery.last_error = str(error)
            if delivery.attempts >= settings.NOTIFY_WEBHOOK_MAX_ATTEMPTS:
                delivery.status = DeliveryStatus.FAILED
        else:
            delivery.status, delivery.sent_at, delivery.last_error = DeliveryStatus.SENT, now, ""
        delivery.save(update_fields=["attempts", "status", "sent_at", "last_error"])
    if delivery.status == DeliveryStatus.PENDING:
        raise DeliveryRetry(delivery.last_error)
    return delivery.status


def webhook_sweep(*, now: datetime, limit: int = 50) -> dict:
    """Post the deliveries still pending NOTIFY_WEBHOOK_SWEEP_AFTER_S after they were queued (a crash between
    the commit that made them and the enqueue, a broker away, retries lost), oldest first, at most ``limit``
    a run, each once through :func:`webhook_deliver`; one still failing waits for the next sweep until its
    attempts are spent. Deliveries to an endpoint switched off since are left alone."""
    cutoff = now - timedelta(seconds=settings.NOTIFY_WEBHOOK_SWEEP_AFTER_S)
    due = list(
        WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING, created_at__lte=cutoff, endpoint__active=True)
        .order_by("created_at", "pk").values_list("pk", flat=True)[:limit]
    )
    outcome = {"due": len(due), DeliveryStatus.SENT: 0, DeliveryStatus.FAILED: 0, "retry": 0, BUSY: 0}
    for delivery_id in due:
        try:
            status = webhook_deliver(delivery_id=delivery_id, now=now)
        except DeliveryRetry:
            status = "retry"
        outcome[status] = outcome.get(status, 0) + 1
    return outcome


@shared_task(bind=True, name="accounting.tasks.deliver_webhook", ignore_result=True, max_retries=10, time_limit=60,
             soft_time_limit=45)
def deliver_webhook(self, delivery_id: int) -> str:
    """Post one webhook delivery; a failed post is retried after 2, 4, 8, … seconds until the delivery's
    attempts (NOTIFY_WEBHOOK_MAX_ATTEMPTS) are spent. It lives here, not in accounting/tasks.py, so that the
    services that enqueue it import it from their own domain (accounting/tasks.py re-exports it for Celery)."""
    try:
        return webhook_deliver(delivery_id=delivery_id)
    except DeliveryRetry as failure:
        raise self.retry(exc=failure, countdown=2 ** (self.request.retries + 1)) from None
