"""Shared cast of the booking page tests: a fixed clock and a week of bookings (see helpers.py)."""

import pytest
from django.utils import timezone

from cluster.bookings.services import maintenance_create
from cluster.models import NodeStatusPeriod
from teams.models import Project
from tests.cluster.bookings.pages.helpers import NOW, at, book, gpu


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    """``timezone.now()`` is NOW for the views and the services alike."""

    class Clock:
        now = NOW

    monkeypatch.setattr(timezone, "now", lambda: Clock.now)
    return Clock


@pytest.fixture
def week(team_a, team_b, small_cluster, engineer_a, lead_a, engineer_b):
    """This week: engineer A's booking, lead A's, engineer B's (with a private note), B's across the week's
    end, a maintenance window on h200-a, and two periods in which h200-b was unreachable."""
    alpha_pre = Project.objects.get(slug="alpha-pre")
    beta_vision = Project.objects.get(slug="beta-vision")
    h200_b = small_cluster["nodes"][1]
    NodeStatusPeriod.objects.create(node=h200_b, status="unreachable", started_at=at(2), ended_at=at(6))
    NodeStatusPeriod.objects.create(node=h200_b, status="up", started_at=at(6), ended_at=at(7))
    NodeStatusPeriod.objects.create(node=h200_b, status="unreachable", started_at=at(7))
    return {
        "mine": book(engineer_a, team_a, start=at(34), end=at(38), gpus=[gpu("h200-a/0")], project=alpha_pre),
        "team": book(lead_a, team_a, start=at(58), end=at(60), gpus=[gpu("h200-a/1")]),
        "other": book(engineer_b, team_b, start=at(82), end=at(84), gpus=[gpu("h200-b/0")], project=beta_vision,
                      note="private purpose"),
        "across": book(engineer_b, team_b, start=at(166), end=at(170), gpus=[gpu("h200-b/1")]),
        "maintenance": maintenance_create(node=small_cluster["nodes"][0], start=at(96), end=at(102), reason="firmware"),
    }
