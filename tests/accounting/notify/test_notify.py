"""Alerts reaching people (accounting/notify/services.py, accounting/notify/webhooks.py): fan-out, e-mail, digests,
webhooks to a local test server, and the in-app list with its badge."""

import base64
import hashlib
import hmac
import json
import threading
import urllib.parse
from datetime import date, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import time_machine
from django.core import mail
from django.db import connection
from django.urls import reverse

from accounting import tasks
from accounting.models import (
    DeliveryStatus,
    Notification,
    Quota,
    Subscription,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookPreset,
)
from accounting.notify.services import fan_out, send_digests
from cluster.choices import AlertKind, AlertSubject, AlertTier
from cluster.models import Alert, Node
from cluster.status.services import alert_raise
from tests.conftest import T0

pytestmark = pytest.mark.django_db

SECRET = "SEC-test-secret"


@pytest.fixture(autouse=True)
def digest_time(settings):
    settings.TIME_ZONE = "Asia/Shanghai"  # 08:30 there is 00:30 UTC
    settings.NOTIFY_DIGEST_LOCAL_TIME = "08:30"


@pytest.fixture
def cast(lead_a, lead_b, engineer_a, engineer_b, admin_user):
    for user in (lead_a, lead_b, engineer_a, engineer_b, admin_user):
        user.email = f"{user.username}@example.org"
        user.save()
    return {"lead_a": lead_a, "lead_b": lead_b, "engineer_a": engineer_a, "engineer_b": engineer_b,
            "admin": admin_user}


def quota_of(team):
    return Quota.objects.create(team=team, period_start=date(2026, 11, 1), expires=date(2026, 12, 1),
                                card_hours=Decimal(100))


def raise_quota(quota, kind=AlertKind.QUOTA_100, tier=AlertTier.CRITICAL, at=T0):
    return alert_raise(subject_type=AlertSubject.QUOTA, subject_id=quota.pk, subject_label=f"{quota.team} quota",
                       kind=kind, tier=tier, message="120 of 100 card-hours used.", at=at)[0]


def raise_node(node, at=T0):
    return alert_raise(subject_type=AlertSubject.NODE, subject_id=node.pk, subject_label=node.hostname,
                       kind=AlertKind.NODE_UNREACHABLE, tier=AlertTier.CRITICAL, message="timed out", at=at)[0]


def recipients(alert):
    return set(Notification.objects.filter(alert=alert).values_list("user__username", flat=True))


# ---- fan-out and critical e-mail ------------------------------------------------------------------------

def test_it_notifies_each_recipient_once_and_emails_critical_alerts_once(cast, team_a):
    node = Node.objects.create(hostname="n1")
    Subscription.objects.create(user=cast["engineer_b"], subject_type=AlertSubject.NODE)
    quota_alert = raise_quota(quota_of(team_a))
    node_alert = raise_node(node)
    info = alert_raise(subject_type=AlertSubject.NODE, subject_id=node.pk, subject_label="n1",
                       kind=AlertKind.AGENT_ERROR, tier=AlertTier.INFO, message="odd", at=T0)[0]

    first = fan_out(now=T0 + timedelta(minutes=1))
    second = fan_out(now=T0 + timedelta(minutes=2))

    assert recipients(quota_alert) == {"lena-lead-a"}
    assert recipients(node_alert) == {"alice-admin", "bea-eng-b"}
    assert recipients(info) == set()  # info stays on the boards
    assert Notification.objects.count() == 3
    assert first["emailed"] == 3 and second == {"alerts": 0, "notifications": 0, "deliveries": 0, "emailed": 0}
    assert sorted(message.to[0] for message in mail.outbox) == [
        "alice-admin@example.org", "bea-eng-b@example.org", "lena-lead-a@example.org",
    ]
    assert "Critical" in mail.outbox[0].subject
    assert not Notification.objects.filter(emailed_at__isnull=True).exists()


def test_it_notifies_the_booker_of_a_booking_alert(cast, team_a, small_cluster):
    from cluster.bookings.services import booking_create
    from cluster.models import Gpu

    booking = booking_create(user=cast["engineer_a"], team=team_a, project=team_a.projects.get(),
                             gpus=[Gpu.objects.get(uuid="GPU-h200-a-0")], start=T0 + timedelta(hours=1),
                             end=T0 + timedelta(hours=3), now=T0)
    alert = alert_raise(subject_type=AlertSubject.BOOKING, subject_id=booking.pk, subject_label="booking",
                        kind=AlertKind.BOOKING_IDLE, tier=AlertTier.WARNING, message="idle", at=T0)[0]
    fan_out(now=T0)
    assert recipients(alert) == {"ed-eng-a"}
    assert mail.outbox == []  # a warning waits for the digest


def test_a_new_episode_notifies_again(cast, team_a):
    quota = quota_of(team_a)
    first = raise_quota(quota)
    fan_out(now=T0)
    Alert.objects.filter(pk=first.pk).update(closed_at=T0 + timedelta(hours=1))
    second = raise_quota(quota, at=T0 + timedelta(days=3))
    fan_out(now=T0 + timedelta(days=3))
    assert Notification.objects.filter(user=cast["lead_a"]).count() == 2
    assert len(mail.outbox) == 2 and second.pk != first.pk


# ---- daily digest ---------------------------------------------------------------------------------------

def test_digests_are_assembled_per_recipient_once_a_local_day(cast, team_a, team_b):
    quota_a, quota_b = quota_of(team_a), quota_of(team_b)
    raise_quota(quota_a, kind=AlertKind.QUOTA_50, tier=AlertTier.WARNING)
    raise_quota(quota_a, kind=AlertKind.QUOTA_EXPIRY, tier=AlertTier.WARNING)
    raise_quota(quota_b, kind=AlertKind.QUOTA_75, tier=AlertTier.WARNING)
    fan_out(now=T0)
    assert mail.outbox == []

    # 2 November 00:10 UTC is 08:10 in Shanghai: before the digest time.
    assert send_digests(now=T0 + timedelta(minutes=10)) == 0
    assert send_digests(now=T0 + timedelta(minutes=31)) == 2
    assert send_digests(now=T0 + timedelta(minutes=46)) == 0
    by_recipient = {message.to[0]: message for message in mail.outbox}
    assert set(by_recipient) == {"lena-lead-a@example.org", "bo-lead-b@example.org"}
    assert "2 warnings" in by_recipient["lena-lead-a@example.org"].subject
    assert "Quota 50 % used" in by_recipient["lena-lead-a@example.org"].body
    assert "Quota expires soon" in by_recipient["lena-lead-a@example.org"].body
    assert "Team Beta" not in by_recipient["lena-lead-a@example.org"].body
    assert "Quota 75 % used" in by_recipient["bo-lead-b@example.org"].body

    # A warning later that day waits for tomorrow's digest, which carries only it.
    raise_quota(quota_a, kind=AlertKind.QUOTA_75, tier=AlertTier.WARNING, at=T0 + timedelta(hours=2))
    fan_out(now=T0 + timedelta(hours=2))
    assert send_digests(now=T0 + timedelta(hours=3)) == 0
    assert send_digests(now=T0 + timedelta(days=1, minutes=31)) == 1
    assert len(mail.outbox) == 3
    assert "1 warning" in mail.outbox[-1].subject and "Quota 75 % used" in mail.outbox[-1].body


# ---- webhooks -------------------------------------------------------------------------------------------

class Recorder(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append({"path": self.path, "headers": dict(self.headers), "body": body})
        status = self.server.answers.pop(0) if self.server.answers else 200
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args):
        pass


@pytest.fixture
def hook_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.received, server.answers = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def eager_delivery(monkeypatch):
    """``deliver_webhook.delay`` runs the task at once, Celery retries included (eager apply)."""
    results = []
    monkeypatch.setattr(tasks.deliver_webhook, "delay",
                        lambda delivery_id: results.append(tasks.deliver_webhook.apply(args=[delivery_id])))
    return results


def test_a_critical_alert_is_posted_to_a_generic_webhook_once(cast, team_a, hook_server, eager_delivery,
                                                              django_capture_on_commit_callbacks):
    WebhookEndpoint.objects.create(name="ops", url=hook_server.url, secret=SECRET)
    WebhookEndpoint.objects.create(name="inactive", url=hook_server.url, active=False)
    alert = raise_quota(quota_of(team_a))
    raise_quota(quota_of(team_a.__class__.objects.create(name="Team Gamma", slug="gamma", cost_centre="CC-G")),
                kind=AlertKind.QUOTA_50, tier=AlertTier.WARNING)  # below the endpoint's tier
    for minute in (1, 2):
        with django_capture_on_commit_callbacks(execute=True):
            fan_out(now=T0 + timedelta(minutes=minute))

    assert len(hook_server.received) == 1
    request = hook_server.received[0]
    payload = json.loads(request["body"])
    assert payload["alert"]["id"] == alert.pk and payload["alert"]["kind"] == "quota_100"
    assert payload["alert"]["tier"] == "critical" and payload["alert"]["subject"] == "Team Alpha quota"
    expected = "sha256=" + hmac.new(SECRET.encode(), request["body"], hashlib.sha256).hexdigest()
    assert request["headers"]["X-Cardhour-Signature"] == expected
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.SENT, 1)
    # Running the task again for a sent delivery posts nothing.
    tasks.deliver_webhook.apply(args=[delivery.pk])
    assert len(hook_server.received) == 1


def test_a_dingtalk_webhook_is_signed_as_the_robot_checks(cast, hook_server):
    endpoint = WebhookEndpoint.objects.create(name="dingtalk", url=hook_server.url + "?access_token=abc",
                                              preset=WebhookPreset.DINGTALK, secret=SECRET)
    with connection.cursor() as cursor:
        cursor.execute("SELECT secret FROM accounting_webhookendpoint WHERE id = %s", [endpoint.pk])
        assert cursor.fetchone()[0].startswith("fernet:")  # stored encrypted
    alert = raise_node(Node.objects.create(hostname="n1"))
    delivery = WebhookDelivery.objects.create(endpoint=endpoint, alert=alert, created_at=T0)
    tasks.deliver_webhook.apply(args=[delivery.pk])

    request = hook_server.received[0]
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(request["path"]).query)
    assert query["access_token"] == ["abc"]
    timestamp, sign = query["timestamp"][0], query["sign"][0]
    digest = hmac.new(SECRET.encode(), f"{timestamp}\n{SECRET}".encode(), hashlib.sha256).digest()
    assert sign == base64.b64encode(digest).decode()  # parse_qs undid the URL encoding
    body = json.loads(request["body"])
    assert body["msgtype"] == "text" and "Node unreachable · n1" in body["text"]["content"]


def test_a_feishu_webhook_carries_its_signature_in_the_body(cast, hook_server):
    endpoint = WebhookEndpoint.objects.create(name="feishu", url=hook_server.url, preset=WebhookPreset.FEISHU,
                                              secret=SECRET)
    alert = raise_node(Node.objects.create(hostname="n1"))
    delivery = WebhookDelivery.objects.create(endpoint=endpoint, alert=alert, created_at=T0)
    tasks.deliver_webhook.apply(args=[delivery.pk])
    body = json.loads(hook_server.received[0]["body"])
    key = f"{body['timestamp']}\n{SECRET}".encode()
    assert body["sign"] == base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
    assert body["msg_type"] == "text" and "n1" in body["content"]["text"]


def test_a_failing_webhook_is_retried_until_it_is_sent(cast, hook_server, eager_delivery,
                                                       django_capture_on_commit_callbacks):
    hook_server.answers = [500]
    WebhookEndpoint.objects.create(name="flaky", url=hook_server.url)
    raise_node(Node.objects.create(hostname="n1"))
    with django_capture_on_commit_callbacks(execute=True):
        fan_out(now=T0)
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.last_error) == (DeliveryStatus.SENT, 2, "")
    assert len(hook_server.received) == 2


def test_a_webhook_that_keeps_failing_is_given_up(cast, hook_server, settings):
    settings.NOTIFY_WEBHOOK_MAX_ATTEMPTS = 3
    hook_server.answers = [500] * 10
    endpoint = WebhookEndpoint.objects.create(name="down", url=hook_server.url)
    delivery = WebhookDelivery.objects.create(endpoint=endpoint, alert=raise_node(Node.objects.create(hostname="n1")),
                                              created_at=T0)
    tasks.deliver_webhook.apply(args=[delivery.pk])
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts, delivery.last_error) == (DeliveryStatus.FAILED, 3, "HTTP 500")
    assert len(hook_server.received) == 3


# ---- in-app ---------------------------------------------------------------------------------------------

def test_the_notification_page_lists_marks_read_and_the_badge_counts(client, cast, team_a):
    quota = quota_of(team_a)
    older = raise_quota(quota, kind=AlertKind.QUOTA_50, tier=AlertTier.WARNING, at=T0)
    fan_out(now=T0)
    newer = raise_quota(quota, kind=AlertKind.QUOTA_75, tier=AlertTier.WARNING, at=T0 + timedelta(hours=1))
    fan_out(now=T0 + timedelta(hours=1))
    client.force_login(cast["lead_a"])
    url = reverse("accounting:notifications")

    page = client.get(url)
    assert page.status_code == 200
    html = page.content.decode()
    assert html.index("Quota 75 % used") < html.index("Quota 50 % used")  # newest first
    assert page.context["notifications_unread"] == 2
    assert 'data-testid="notifications-badge"' in html

    mine = Notification.objects.filter(user=cast["lead_a"])
    client.post(url, {"notification": mine.get(alert=older).pk})
    assert set(mine.filter(read_at__isnull=True).values_list("alert", flat=True)) == {newer.pk}
    other = client.get(url).context["notifications_unread"]
    assert other == 1
    client.post(url)
    assert not mine.filter(read_at__isnull=True).exists()
    assert client.get(url).context["notifications_unread"] == 0

    # Someone else's notification cannot be marked from here.
    client.force_login(cast["lead_b"])
    Notification.objects.update(read_at=None)
    client.post(url, {"notification": mine.first().pk})
    assert mine.filter(read_at__isnull=True).count() == 2


@time_machine.travel(T0 + timedelta(days=3, hours=9), tick=False)  # the tasks read the clock
def test_the_periodic_tasks_run_twice_send_nothing_twice(cast, team_a, small_cluster):
    from accounting.models import DailyUsage
    from accounting.quotas.rules import TICKS_PER_CARD_HOUR
    from cluster.models import Gpu

    today = date(2026, 11, 5)
    quota = Quota.objects.create(team=team_a, period_start=today, expires=today + timedelta(days=60),
                                 card_hours=Decimal(10))
    DailyUsage.objects.create(day=today, gpu=Gpu.objects.first(), state="busy", team=team_a,
                              project=team_a.projects.get(), ticks=11 * TICKS_PER_CARD_HOUR)
    for _run in range(2):
        tasks.quota_alerts()
        tasks.notify_fan_out()
    assert set(Alert.objects.filter(subject_id=quota.pk).values_list("kind", flat=True)) == {
        "quota_50", "quota_75", "quota_90", "quota_100",
    }
    assert Notification.objects.filter(user=cast["lead_a"]).count() == 4
    assert [message.to for message in mail.outbox] == [["lena-lead-a@example.org"]]  # the critical one, at once
