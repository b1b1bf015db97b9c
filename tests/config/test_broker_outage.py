"""Redis away (issue 17): Redis is only Celery's broker here (no cache, sessions in PostgreSQL), and no request
enqueues a task, so pages and the API keep serving; the one enqueue of the periodic work (webhook deliveries
after fan-out) leaves its deliveries pending for the sweeper instead of failing the run.

The broker is pointed at a closed loopback port (a port bound and let go) for the length of a test."""

import socket
import time
from contextlib import contextmanager
from datetime import timedelta

import kombu.exceptions
import pytest
from django.urls import reverse

from accounting.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from accounting.notify.services import fan_out
from accounting.notify.webhooks import deliver_webhook, webhook_sweep
from cluster.choices import AlertTier
from cluster.models import Node
from cluster.status.services import node_alert_raise
from config.celery import app
from tests.conftest import T0


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _forget_connections() -> None:
    # The producer pool keeps connections to the broker it first met: drop it so the next send connects anew.
    app.amqp._producer_pool = None
    app._pool = None


@contextmanager
def broker_away():
    saved = app.conf.broker_url
    app.conf.broker_url = f"redis://127.0.0.1:{closed_port()}/0"
    _forget_connections()
    try:
        yield
    finally:
        app.conf.broker_url = saved
        _forget_connections()


def test_sending_a_task_fails_while_the_broker_is_away():
    """The premise of the tests below: with the broker away, enqueueing raises (it does not hang)."""
    with broker_away(), pytest.raises(kombu.exceptions.OperationalError, match="Connection refused"):
        deliver_webhook.delay(0)


@pytest.mark.django_db
def test_pages_and_the_api_keep_serving(client, api, admin_user, small_cluster):
    client.force_login(admin_user)
    api.as_user(admin_user)
    with broker_away():
        for url in (reverse("cluster:inventory"), reverse("cluster:node-detail", args=["h200-a"]),
                    reverse("cluster:job-list"), reverse("accounting:notifications")):
            response = client.get(url)
            assert response.status_code == 200, url
        assert api.get("/api/v1/nodes/").status_code == 200
        created = api.post("/api/v1/nodes/", {"hostname": "n-new", "pool": "train"}, format="json")
        assert created.status_code == 201, created.content
    assert Node.objects.filter(hostname="n-new").exists()


@pytest.mark.django_db
def test_fan_out_with_the_broker_away_leaves_deliveries_to_the_sweeper(receiver, django_capture_on_commit_callbacks):
    WebhookEndpoint.objects.create(name="ops", url=receiver.url)
    node_alert_raise(Node.objects.create(hostname="n1"), kind="node_unreachable", tier=AlertTier.CRITICAL,
                     message="silent", at=T0)
    started = time.monotonic()
    with broker_away(), django_capture_on_commit_callbacks(execute=True) as callbacks:
        result = fan_out(now=T0)
    assert len(callbacks) == 1  # the enqueue ran, and failed, without failing the run
    assert time.monotonic() - started < 20
    assert result["deliveries"] == 1
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 0)
    assert receiver.posts == 0

    # The broker is back; the beat's sweep posts what was left.
    assert webhook_sweep(now=T0 + timedelta(minutes=6))[DeliveryStatus.SENT] == 1
    assert receiver.posts == 1
    delivery.refresh_from_db()
    assert delivery.status == DeliveryStatus.SENT
