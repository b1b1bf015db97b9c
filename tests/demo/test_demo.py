"""`make demo`: the demo data set, and the launcher serving it end to end."""

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from http.cookiejar import CookieJar

import pytest
import time_machine
from django.contrib.auth import authenticate
from django.test import RequestFactory
from django.utils import timezone

from cluster.bookings.services import BookingRefused, booking_create
from cluster.models import Booking, Gpu, GpuModel, MaintenanceWindow, Node, TeamGuarantee
from config.embedded import BASE_DIR
from config.launcher import FLEET_NODES
from demo.bookings import week_start
from demo.cluster import DEMO_PASSWORD, load_demo
from teams.models import Membership, Team
from teams.roles import TeamRole, is_admin, is_finance
from tests.agents.agent_helpers import free_port, free_port_run

NOW = datetime(2026, 11, 4, 4, 0, tzinfo=UTC)  # a Wednesday, noon in Shanghai


@pytest.mark.django_db
@time_machine.travel(NOW, tick=False)  # the demo's bookings are dated by the clock: the same week for both loads
def test_the_demo_data_has_a_cluster_and_every_role_and_loads_twice_unchanged():
    load_demo(history_days=0)  # the month of history is tests/demo/test_history.py's
    counts = (Node.objects.count(), Gpu.objects.count(), Team.objects.count(), Membership.objects.count(),
              Booking.objects.count(), MaintenanceWindow.objects.count())
    load_demo(history_days=0)
    assert (Node.objects.count(), Gpu.objects.count(), Team.objects.count(), Membership.objects.count(),
            Booking.objects.count(), MaintenanceWindow.objects.count()) == counts
    whole = Gpu.objects.filter(mig_parent__isnull=True)
    assert Node.objects.count() >= 8
    assert all(node.gpus.filter(mig_parent__isnull=True).count() == 8 for node in Node.objects.all())
    assert 2 <= GpuModel.objects.filter(gpus__in=whole).distinct().count() <= 3
    assert Gpu.objects.filter(mig_parent__isnull=False).count() == 4  # the H100 capture's MIG layout
    sign_in = RequestFactory().post("/accounts/login/")  # the sign-in throttle (django-axes) needs the request
    users = {name: authenticate(sign_in, username=name, password=DEMO_PASSWORD)
             for name in ["admin", "finance", "lead-llm", "eng-llm"]}
    assert all(users.values()), "every demo login works with the printed password"
    assert is_admin(users["admin"]) and is_finance(users["finance"])
    assert Membership.objects.get(user=users["lead-llm"]).role == TeamRole.LEAD
    assert Membership.objects.get(user=users["eng-llm"]).role == TeamRole.ENGINEER


@pytest.mark.django_db
@time_machine.travel(NOW, tick=False)
def test_the_demo_has_a_week_of_bookings_from_every_team_and_a_maintenance_window():
    load_demo(history_days=0)
    monday = week_start(NOW)
    this_week = Booking.objects.filter(start__lt=monday + timedelta(days=7), end__gt=monday)
    assert this_week.count() >= 8
    assert set(this_week.values_list("team__slug", flat=True)) == {"llm", "vision", "inference"}
    assert {local.weekday() for local in (timezone.localtime(b.start) for b in this_week)} >= {0, 1, 2, 3, 4, 5}
    assert MaintenanceWindow.objects.filter(start__gte=monday).exists()


@pytest.mark.django_db
@time_machine.travel(NOW, tick=False)
def test_the_demo_guarantees_llm_training_eight_h200s_on_weekdays():
    load_demo(history_days=0)
    guarantee = TeamGuarantee.objects.get(team__slug="llm")
    assert (guarantee.gpu_model.short_name, guarantee.gpus, guarantee.hours_label) == (
        "H200", 8, "Monday to Friday 09:00–18:00")
    # Next Tuesday 09:00–10:00 UTC lies in the working hours in UTC and in Shanghai, and no H200 is held:
    # another team may take all but the 8.
    start = datetime(2026, 11, 10, 9, tzinfo=UTC)
    vision = Team.objects.get(slug="vision")
    lead = Membership.objects.get(team=vision, role=TeamRole.LEAD).user
    h200 = GpuModel.objects.get(short_name="H200")
    total = Gpu.objects.filter(model=h200, mig_parent__isnull=True).count()
    with pytest.raises(BookingRefused) as refused:
        booking_create(user=lead, team=vision, gpu_model=h200, count=total - 7, start=start,
                       end=start + timedelta(hours=1), now=NOW)
    assert refused.value.status == 409 and "guaranteed share of team LLM Training (8 × H200" in refused.value.message


def read_output(process: subprocess.Popen, *, until: str | None = None, timeout_s: float) -> str:
    """What ``process`` writes, up to a chunk containing ``until`` (None: up to its exit), its exit or the
    timeout, whichever comes first. Never a blocking read: a grandchild that outlives the process may
    hold the pipe open, and a readline() would then wait for ever."""
    chunks, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stdout], [], [], 0.5)
        if ready:
            chunk = os.read(process.stdout.fileno(), 65536).decode(errors="replace")
            if not chunk:
                break  # every writer closed the pipe
            chunks.append(chunk)
            if until is not None and until in "".join(chunks[-2:]):
                break
        elif process.poll() is not None:
            break  # it exited and nothing more is coming from it
    return "".join(chunks)


@pytest.mark.celery_worker
def test_the_launcher_serves_the_pages_with_demo_logins_and_stops_cleanly():
    """What `make demo` runs, on the embedded servers (even in CI), on spare ports (the web server's and a
    run of free ones for the simulated agents, not 9400–9407) and a spare state folder."""
    port, agent_port = free_port(), free_port_run(FLEET_NODES)
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "FIELD_ENCRYPTION_KEY"}}
    state = f"test-launcher-{os.getpid()}"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "config.launcher", "--port", str(port), "--agent-port", str(agent_port),
         "--state", state, "--history-days", "2"],
        cwd=BASE_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, bufsize=0,
        start_new_session=True,
    )
    try:
        text = read_output(launcher, until="Cardhour is running at", timeout_s=120)
        assert f"http://127.0.0.1:{port}/" in text, text[-3000:]
        assert re.search(r"lead-llm\s+lead of llm", text)

        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        login_page = opener.open(f"http://127.0.0.1:{port}/accounts/login/").read().decode()
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page).group(1)
        form = urllib.parse.urlencode(
            {"username": "lead-llm", "password": DEMO_PASSWORD, "csrfmiddlewaretoken": csrf, "next": "/inventory/"}
        ).encode()
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/accounts/login/", data=form, headers={"Referer": f"http://127.0.0.1:{port}/"}
        )
        inventory = opener.open(request).read().decode()
        assert "gpu-h200-01" in inventory
        assert "cardhour.css" in inventory
        css = opener.open(f"http://127.0.0.1:{port}/static/css/cardhour.css")
        assert css.status == 200
    finally:
        os.killpg(launcher.pid, signal.SIGINT)
        rest = read_output(launcher, timeout_s=60)
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait(timeout=10)
        launcher.stdout.close()
    assert launcher.returncode == 0, rest[-3000:]
    assert "stopping PostgreSQL and Redis" in rest
    state_dir = BASE_DIR / "var" / state
    assert not (state_dir / "pgdata" / "postmaster.pid").exists()
    assert not (state_dir / "redis" / "redis.sock").exists()
    shutil.rmtree(state_dir, ignore_errors=True)
