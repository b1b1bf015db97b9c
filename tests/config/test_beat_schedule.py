"""Two beat schedulers by mistake (issue 17): every periodic task of CELERY_BEAT_SCHEDULE, sent twice at the
same moment, has its effect once. The tasks run in two threads each (two workers, each on its own database
connection), started together by a barrier, on a cast with a critical node alert (e-mailed at once and posted
to a webhook), a warning (the daily digest), team leads and admins (the weekly report) and a month to close.

Each task is once-only by its own means: an advisory lock around the run (collect, bookings, usage, close,
quotas, fan-out, digests, prune), a claim per item (rollup buckets, webhook deliveries, e-mailed
notifications) or a unique mark written before the e-mail (digests, weekly reports); see docs/decisions.md,
"Hardening: faults"."""

import threading
from collections import Counter
from datetime import date, timedelta

import pytest
import time_machine
from django.core import mail
from django.db import connection

from accounting.models import DigestSent, Notification, Statement, WebhookDelivery, WebhookEndpoint
from cluster.choices import AlertKind, AlertTier
from cluster.models import CollectionState, Node
from cluster.status.services import node_alert_raise
from config.celery import app
from tests.conftest import T0

MONDAY_MORNING = T0 + timedelta(hours=9)  # Monday 2 November 2026, 09:00 UTC: after the 08:30 digest time


@pytest.fixture
def eager():
    """Tasks a task sends (webhook posts, collection shards) run at once in the sending thread, as a worker
    would run them; no message is left on the test session's broker."""
    saved = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield
    app.conf.task_always_eager = saved


def twice_at_once(task_name: str) -> list:
    app.loader.import_default_modules()  # the tasks modules, as a worker imports them at start
    task = app.tasks[task_name]
    barrier, results, errors = threading.Barrier(2), [], []

    def worker():
        try:
            barrier.wait()
            results.append(task.apply().get())
        except BaseException as error:  # reported below, with the task's name
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), task_name
    assert errors == [], (task_name, errors)
    return results


@pytest.mark.django_db(transaction=True)
@time_machine.travel(MONDAY_MORNING, tick=False)
def test_every_periodic_task_sent_twice_at_once_has_its_effect_once(
    settings, receiver, eager, admin_user, lead_a, engineer_a, team_a,
):
    settings.TIME_ZONE = settings.CARDHOUR_BUSINESS_TIME_ZONE = "UTC"
    settings.NOTIFY_DIGEST_LOCAL_TIME = "08:30"
    settings.NOTIFY_WEBHOOK_SWEEP_AFTER_S = 1  # the sweep, too, finds the delivery due
    for user in (admin_user, lead_a, engineer_a):
        user.email = f"{user.username}@example.org"
        user.save(update_fields=["email"])
    WebhookEndpoint.objects.create(name="ops", url=receiver.url)
    node = Node.objects.create(hostname="n1")
    CollectionState.objects.create(node=node, data_complete_to=MONDAY_MORNING)  # October's data is all in
    node_alert_raise(node, kind=AlertKind.NODE_UNREACHABLE, tier=AlertTier.CRITICAL, message="silent",
                     at=MONDAY_MORNING - timedelta(minutes=5))
    node_alert_raise(node, kind=AlertKind.AGENT_ERROR, tier=AlertTier.WARNING, message="odd answers",
                     at=MONDAY_MORNING - timedelta(minutes=4))

    names = [entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()]
    assert len(names) == len(set(names)) >= 13
    for name in names:
        twice_at_once(name)
    for name in names:  # and each again, as the second beat's next period would
        twice_at_once(name)

    # The critical alert: one notification per admin, e-mailed once; posted to the webhook once.
    assert Notification.objects.filter(user=admin_user).count() == 2
    subjects = Counter((message.subject, tuple(message.to)) for message in mail.outbox)
    assert all(count == 1 for count in subjects.values()), subjects
    critical = [subject for subject, to in subjects if subject.startswith("[Cardhour] Critical")]
    assert critical == ["[Cardhour] Critical: Node unreachable · n1"]
    assert receiver.posts == 1
    assert WebhookDelivery.objects.get().attempts == 1
    # The warning: one digest, to the admin, marked once.
    assert list(DigestSent.objects.values_list("user_id", "notification_count")) == [(admin_user.pk, 1)]
    digests = [to for subject, to in subjects if subject == "[Cardhour] 1 warning"]
    assert digests == [(admin_user.email,)]
    # Last week's report: once to each lead and admin.
    weekly = sorted(to for subject, to in subjects if subject.startswith("[Cardhour] Weekly report"))
    assert weekly == sorted([(admin_user.email,), (lead_a.email,)])
    # Last month closed once (an empty cluster has nothing to wait for).
    assert Statement.objects.filter(period=date(2026, 10, 1)).count() == 1
