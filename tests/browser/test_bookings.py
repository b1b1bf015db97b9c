"""An engineer books two GPUs from the calendar, sees them as theirs, and cancels them (the server's clock
stands at the browser tests' NOW, see conftest.py; the booking is made next week, ahead and within the
horizon)."""

import re
from datetime import datetime, time, timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from cluster.bookings.services import booking_create
from cluster.models import Gpu, GpuModel, Node


def local_midnight(day):
    return timezone.make_aware(datetime.combine(day, time.min), timezone.get_current_timezone())


@pytest.fixture
def cluster(team_b, engineer_b):
    """An H200 node with four GPUs (up), an L40S node in maintenance, and team Beta's booking of GPU 3
    next Wednesday 09:00–13:00."""
    h200 = GpuModel.objects.create(name="NVIDIA H200", short_name="H200", memory_mib=143771)
    l40s = GpuModel.objects.create(name="NVIDIA L40S", short_name="L40S", memory_mib=46068)
    node = Node.objects.create(hostname="h200-x", pool="train")
    gpus = [
        Gpu.objects.create(node=node, index=index, uuid=f"GPU-h200-x-{index}", model=h200, memory_mib=143771)
        for index in range(4)
    ]
    down = Node.objects.create(hostname="l40s-m", pool="infer", status="maintenance")
    for index in range(2):
        Gpu.objects.create(node=down, index=index, uuid=f"GPU-l40s-m-{index}", model=l40s, memory_mib=46068)
    today = timezone.localdate()
    next_monday = today - timedelta(days=today.weekday()) + timedelta(days=7)
    wednesday = local_midnight(next_monday + timedelta(days=2))
    booking_create(user=engineer_b, team=team_b, start=wednesday + timedelta(hours=9),
                   end=wednesday + timedelta(hours=13), gpus=[gpus[3]], note="private purpose")
    return {"h200": h200, "next_monday": next_monday, "wednesday": wednesday}


def test_an_engineer_books_two_gpus_from_the_calendar_and_cancels_them(page, live_server, login, screenshot,
                                                                       engineer_a, cluster):
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    login(page, live_server, engineer_a.username)
    page.locator("a[data-nav=bookings]").click()
    expect(page).to_have_url(f"{live_server.url}/bookings/")
    page.get_by_test_id("next-week").click()
    next_monday = cluster["next_monday"]
    expect(page).to_have_url(f"{live_server.url}/bookings/?week={next_monday.isoformat()}")
    expect(page.locator(".cal-lane .block-other")).to_have_text(["Team Beta"])
    expect(page.locator(".cal-lane .block-down")).to_have_count(2)  # the L40S node in maintenance

    # Wednesday 10:15, in the middle of the 10:00 half hour, on GPU 0's free area.
    week_start, week_end = local_midnight(next_monday), local_midnight(next_monday + timedelta(days=7))
    fraction = (cluster["wednesday"] + timedelta(hours=10, minutes=15) - week_start) / (week_end - week_start)
    free = page.locator(".cal-lane[data-lane='h200-x/0'] a.lane-free")
    box = free.bounding_box()
    free.click(position={"x": fraction * box["width"], "y": box["height"] / 2})

    expect(page).to_have_url(re.compile(r"/bookings/new/\?gpus=\d+&hours=2&start="))
    slot = timezone.localtime(cluster["wednesday"] + timedelta(hours=10))
    expect(page.locator("#id_start")).to_have_value(slot.strftime("%Y-%m-%dT%H:%M"))
    expect(page.locator("#id_gpu_model")).to_have_value(str(cluster["h200"].pk))
    expect(page.locator("#id_hours")).to_have_value("2")
    page.get_by_label("GPUs of a model").check()
    expect(page.locator("#id_gpus")).to_be_hidden()  # only the chosen way's fields show
    page.locator("#id_count").fill("2")
    screenshot(page, "booking-form")
    page.get_by_test_id("book").click()

    expect(page).to_have_url(f"{live_server.url}/bookings/?week={slot.date().isoformat()}")
    expect(page.locator(".messages")).to_contain_text("Booked h200-x/0, h200-x/1")
    expect(page.locator(".cal-lane .block-mine")).to_have_count(2)
    expect(page.locator(".cal-lane .block-mine").first).to_be_visible()
    expect(page.locator(".cal-lane .block-other")).to_have_text(["Team Beta"])
    assert "private purpose" not in page.content() and "bea-eng-b" not in page.content()
    screenshot(page, "booking-calendar")

    page.get_by_test_id("my-bookings").click()
    row = page.get_by_test_id("bookings-mine").locator("tbody tr")
    expect(row).to_have_count(1)
    expect(row.get_by_test_id("status")).to_have_text("Booked")
    screenshot(page, "booking-mine")
    row.get_by_test_id("cancel").click()
    row.get_by_test_id("confirm-cancel").click()

    expect(page.locator(".messages")).to_contain_text("cancelled")
    expect(page.get_by_test_id("bookings-mine").locator("tbody tr").get_by_test_id("status")).to_have_text("Cancelled")
    page.goto(f"{live_server.url}/bookings/?week={next_monday.isoformat()}")
    expect(page.locator(".cal-lane .block-other")).to_have_count(1)
    expect(page.locator(".cal-lane .block-mine")).to_have_count(0)
    assert not problems, problems
