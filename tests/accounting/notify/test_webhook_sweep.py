"""A webhook delivery left pending (a crash between the commit that made it and the enqueue, the broker away) is
posted by the sweeper, and never twice: not by two sweeps, nor by the sweeper and a late original task at once.
Posts go to a real HTTP receiver on a free loopback port that counts them."""

import threading
from datetime import timedelta

import pytest
from django.db import connection

from accounting import tasks
from accounting.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from accounting.notify.services import fan_out
from accounting.notify.webhooks import BUSY, webhook_deliver, webhook_sweep
from cluster.choices import AlertTier
from cluster.models import Node
from cluster.status.services import node_alert_raise
from tests.conftest import T0


def critical_alert(at=T0):
    alert, _opened = node_alert_raise(Node.objects.create(hostname="n1"), kind="node_unreachable",
                                      tier=AlertTier.CRITICAL, message="silent", at=at)
    return alert


@pytest.mark.django_db
def test_a_delivery_never_enqueued_is_posted_by_the_sweeper_once(receiver, settings):
    settings.NOTIFY_WEBHOOK_SWEEP_AFTER_S = 300
    WebhookEndpoint.objects.create(name="ops", url=receiver.url)
    critical_alert()
    # fan_out commits the delivery; its on-commit enqueue never runs here, as after a crash between the two.
    assert fan_out(now=T0)["deliveries"] == 1
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.PENDING, 0)

    assert webhook_sweep(now=T0 + timedelta(seconds=299))["due"] == 0  # still young: its task may be on the way
    assert receiver.posts == 0
    swept = webhook_sweep(now=T0 + timedelta(seconds=300))
    assert (swept["due"], swept[DeliveryStatus.SENT]) == (1, 1)
    assert receiver.posts == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.sent_at) == (DeliveryStatus.SENT, 1, T0 + timedelta(seconds=300))

    # The next sweep and the original task arriving late post nothing more.
    assert webhook_sweep(now=T0 + timedelta(seconds=360))["due"] == 0
    assert tasks.deliver_webhook.apply(args=[delivery.pk]).get() == DeliveryStatus.SENT
    assert receiver.posts == 1


@pytest.mark.django_db
def test_a_failing_delivery_is_tried_once_a_sweep_until_its_attempts_are_spent(settings):
    settings.NOTIFY_WEBHOOK_MAX_ATTEMPTS = 2
    # A port nobody listens on: every post fails.
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = WebhookEndpoint.objects.create(name="down", url=f"http://127.0.0.1:{port}/hook")
    delivery = WebhookDelivery.objects.create(endpoint=endpoint, alert=critical_alert(), created_at=T0)
    later = T0 + timedelta(hours=1)
    assert webhook_sweep(now=later)["retry"] == 1
    assert webhook_sweep(now=later + timedelta(minutes=1))[DeliveryStatus.FAILED] == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.FAILED, 2)
    assert "refused" in delivery.last_error.lower()
    assert webhook_sweep(now=later + timedelta(minutes=2))["due"] == 0


@pytest.mark.django_db
def test_the_sweeper_leaves_a_switched_off_endpoint_alone(receiver):
    endpoint = WebhookEndpoint.objects.create(name="off", url=receiver.url, active=False)
    WebhookDelivery.objects.create(endpoint=endpoint, alert=critical_alert(), created_at=T0)
    assert webhook_sweep(now=T0 + timedelta(hours=1))["due"] == 0
    assert receiver.posts == 0


@pytest.mark.django_db(transaction=True)
def test_the_sweeper_and_a_late_original_at_once_post_once(receiver):
    """Two workers reach the same delivery together: the first claims it and posts (slowly); the second skips
    it (busy) rather than wait and post again."""
    receiver.delay_s = 2.0
    endpoint = WebhookEndpoint.objects.create(name="ops", url=receiver.url)
    delivery = WebhookDelivery.objects.create(endpoint=endpoint, alert=critical_alert(), created_at=T0)
    now = T0 + timedelta(hours=1)
    results, barrier = [], threading.Barrier(2)

    def worker(run):
        try:
            barrier.wait()
            results.append(run())
        finally:
            connection.close()

    threads = [
        threading.Thread(target=worker, args=(lambda: webhook_sweep(now=now),)),
        threading.Thread(target=worker, args=(lambda: webhook_deliver(delivery_id=delivery.pk, now=now),)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)

    assert receiver.posts == 1
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.SENT, 1)
    # One of the two posted, the other found it claimed.
    (swept,) = [result for result in results if isinstance(result, dict)]
    (delivered,) = [result for result in results if isinstance(result, str)]
    assert sorted([delivered, BUSY if swept[BUSY] else DeliveryStatus.SENT]) == sorted([DeliveryStatus.SENT, BUSY])
    assert swept["due"] == 1 and swept[BUSY] + swept[DeliveryStatus.SENT] == 1


@pytest.mark.django_db(transaction=True)
def test_two_sweeps_at_once_post_each_delivery_once(receiver):
    receiver.delay_s = 0.3
    endpoint = WebhookEndpoint.objects.create(name="ops", url=receiver.url)
    alerts = [node_alert_raise(Node.objects.create(hostname=f"n{i}"), kind="node_unreachable",
                               tier=AlertTier.CRITICAL, message="silent", at=T0)[0] for i in range(4)]
    for alert in alerts:
        WebhookDelivery.objects.create(endpoint=endpoint, alert=alert, created_at=T0)
    now = T0 + timedelta(hours=1)
    barrier = threading.Barrier(2)

    def sweep():
        try:
            barrier.wait()
            webhook_sweep(now=now)
        finally:
            connection.close()

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert receiver.posts == 4
    assert list(WebhookDelivery.objects.order_by().values_list("status", "attempts").distinct()) == [(DeliveryStatus.SENT, 1)]


def test_the_sweeper_is_on_the_beat_schedule(settings):
    entries = [entry for entry in settings.CELERY_BEAT_SCHEDULE.values() if entry["task"] == "accounting.tasks.webhook_sweep"]
    assert len(entries) == 1
    assert entries[0]["schedule"] == settings.NOTIFY_WEBHOOK_SWEEP_EVERY_S
    assert tasks.webhook_sweep.name == "accounting.tasks.webhook_sweep"
