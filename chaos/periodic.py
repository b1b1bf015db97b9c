"""Periodic work under faults: two beat schedulers by mistake (each periodic effect once per period), and a
webhook delivery left pending by a crash between its commit and its enqueue (the sweeper posts it, once)."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from chaos import checks
from chaos.observe import wait_for
from chaos.stack import free_port
from chaos.verdicts import Verdict, task_runs, verdict


def two_beats(ctx) -> Verdict:
    """Both beats send every entry; what the runs write must still be there once: each record stored once
    (none lost), the rollups equal to a recompute, no alert or notification twice. How many runs did work
    is evidence, not the verdict: a recount run twice writes the same rows (docs/decisions.md)."""
    from django.conf import settings

    window = ctx.beats_window_s
    began = checks.minutes_ago(0)
    ctx.stack.start_beat("beat2")
    time.sleep(3)  # both beats sending from here
    start = len(ctx.stack.log_text("worker").splitlines())
    time.sleep(window)
    lines = ctx.stack.log_text("worker").splitlines()[start:]
    ctx.stack.stop("beat2")
    runs = task_runs(lines)
    periods = {entry["task"]: window / float(entry["schedule"]) for entry in settings.CELERY_BEAT_SCHEDULE.values()
               if float(entry["schedule"]) * 2 <= window}
    problems = []
    if not any(runs.get(name, (0, 0))[0] > count + 1 for name, count in periods.items()):
        problems.append("no periodic task was received more often than once a period: the second beat sent nothing")
    collected, counts = checks.collection(ctx.stack.tokens, timeout_s=ctx.catch_up_s)
    rolled, rollup_evidence = checks.rollups(since=began, until=checks.minutes_ago(0), timeout_s=ctx.catch_up_s)
    doubled = _doubled_effects()
    problems += collected + rolled + doubled + [f"stopped: {d}" for d in ctx.stack.dead()]
    shown = " ".join(f"{name.rsplit('.', 1)[-1]}={runs.get(name, (0, 0))[0]}/{runs.get(name, (0, 0))[1]}/{count:.0f}"
                     for name, count in sorted(periods.items()))
    return verdict("two-beats", problems, f"window={window}s received/did-work/periods: {shown} {counts} "
                                          f"{rollup_evidence}")


def _doubled_effects() -> list[str]:
    """Alerts open twice for one subject and kind, and notifications twice for one person and alert."""
    from django.db.models import Count

    from accounting.models import Notification
    from cluster.models import Alert

    problems = []
    alerts = (Alert.objects.filter(closed_at__isnull=True).values("subject_type", "subject_id", "kind")
              .annotate(n=Count("pk")).filter(n__gt=1).count())
    if alerts:
        problems.append(f"{alerts} alerts open twice")
    notes = Notification.objects.values("user_id", "alert_id").annotate(n=Count("pk")).filter(n__gt=1).count()
    if notes:
        problems.append(f"{notes} notifications made twice")
    return problems


class _Receiver(ThreadingHTTPServer):
    """A webhook endpoint on loopback that counts posts per alert id (answering after a second, so that
    two posters would overlap)."""

    def __init__(self) -> None:
        self.posts: dict[int, int] = {}
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", free_port()), _Handler)


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        alert_id = json.loads(body)["alert"]["id"]
        with self.server.lock:
            self.server.posts[alert_id] = self.server.posts.get(alert_id, 0) + 1
        time.sleep(1)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


def webhook(ctx) -> Verdict:
    from django.conf import settings
    from django.db import transaction
    from django.utils import timezone

    from accounting.models import WebhookDelivery, WebhookEndpoint
    from accounting.notify.services import enqueue_deliveries
    from cluster.choices import AlertKind, AlertSubject, AlertTier
    from cluster.models import Alert, Node

    receiver = _Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    try:
        endpoint = WebhookEndpoint.objects.create(name=f"chaos-{receiver.server_port}", preset="generic",
                                                  url=f"http://127.0.0.1:{receiver.server_port}/hook")
        node = Node.objects.order_by("hostname").first()
        sweep_after = timedelta(seconds=settings.NOTIFY_WEBHOOK_SWEEP_AFTER_S)

        def alert(label: str) -> Alert:
            # Closed at once: a node has one open alert of a kind, and the scenario needs two of its own.
            now = timezone.now()
            return Alert.objects.create(subject_type=AlertSubject.NODE, subject_id=node.pk, subject_label=label,
                                        kind=AlertKind.AGENT_ERROR, tier=AlertTier.CRITICAL, message="chaos",
                                        opened_at=now, last_seen_at=now, closed_at=now)

        with transaction.atomic():  # the crash: committed, never enqueued
            stranded = WebhookDelivery.objects.create(endpoint=endpoint, alert=alert("stranded"), created_at=timezone.now())
        with transaction.atomic():  # enqueued, and already old enough for the sweeper: both may try it
            raced = WebhookDelivery.objects.create(endpoint=endpoint, alert=alert("raced"),
                                                   created_at=timezone.now() - sweep_after)
        enqueue_deliveries([raced.pk])
        bound = settings.NOTIFY_WEBHOOK_SWEEP_AFTER_S + 3 * settings.NOTIFY_WEBHOOK_SWEEP_EVERY_S + 30
        started = time.monotonic()
        sent = wait_for(lambda: WebhookDelivery.objects.filter(pk__in=[stranded.pk, raced.pk], status="sent").count() == 2,
                        timeout_s=bound)
        took = time.monotonic() - started
        time.sleep(2 * settings.NOTIFY_WEBHOOK_SWEEP_EVERY_S + 2)  # more sweeps: none may post again
    finally:
        receiver.shutdown()
        WebhookEndpoint.objects.filter(name__startswith="chaos-").update(active=False)
    posts = {label: receiver.posts.get(row.alert_id, 0) for label, row in (("stranded", stranded), ("raced", raced))}
    problems = [] if sent else [f"not both deliveries sent within {bound}s"]
    problems += [f"the {label} delivery was posted {n} times" for label, n in posts.items() if n != 1]
    return verdict("webhook-sweep", problems, f"posts stranded={posts['stranded']} raced={posts['raced']} "
                                              f"sent_in={took:.0f}s")
