"""The people of the load scenario (``python -m bench.load``, issue 17): team members who sign in, browse
the boards, their team's page, the booking calendar, inventory and jobs, and now and then book a GPU
through the API. ``bench.load`` writes the accounts to the file named by ``CARDHOUR_LOAD_USERS``
(username, password, team slug, API token, GPU model names, node hostnames) and runs Locust on this file.

A booking the cluster cannot place (409: the GPUs are taken) is an answer, not an error; any other status
but 201 is a failure, as is any page that does not answer 200.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
from datetime import UTC, datetime, timedelta

from locust import HttpUser, between, task

with open(os.environ["CARDHOUR_LOAD_USERS"]) as handle:
    PEOPLE = json.load(handle)
_NEXT = itertools.count()
CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


class TeamMember(HttpUser):
    # A person reads a page for a while before the next: 5–15 s between clicks.
    wait_time = between(5, 15)

    def on_start(self):
        self.person = PEOPLE["users"][next(_NEXT) % len(PEOPLE["users"])]
        page = self.client.get("/accounts/login/", name="sign-in page")
        token = CSRF.search(page.text)
        with self.client.post(
            "/accounts/login/", name="sign in", catch_response=True, allow_redirects=False,
            data={"username": self.person["username"], "password": self.person["password"],
                  "csrfmiddlewaretoken": token.group(1) if token else ""},
        ) as answer:
            if answer.status_code != 302:
                answer.failure(f"sign-in answered {answer.status_code}")

    def _page(self, path: str, name: str) -> None:
        with self.client.get(path, name=name, catch_response=True, allow_redirects=False) as answer:
            if answer.status_code != 200:
                answer.failure(f"{name} answered {answer.status_code}")

    @task(6)
    def daily_board(self):
        self._page("/", "daily board")

    @task(3)
    def daily_board_live(self):
        self._page("/board/live/", "daily board (live JSON)")

    @task(2)
    def week(self):
        self._page("/board/week/", "week")

    @task(1)
    def month(self):
        self._page("/board/month/", "month")

    @task(3)
    def team_page(self):
        self._page(f"/teams/{self.person['team']}/", "team page")

    @task(2)
    def calendar(self):
        self._page("/bookings/", "booking calendar")

    @task(1)
    def inventory(self):
        self._page("/inventory/", "inventory")

    @task(1)
    def node(self):
        self._page(f"/inventory/nodes/{random.choice(PEOPLE['nodes'])}/", "node page")

    @task(1)
    def jobs(self):
        self._page("/jobs/", "jobs")

    @task(1)
    def book(self):
        # On the 30-minute grid, from the next half hour up to a day ahead, for 30 minutes to 2 hours.
        now = datetime.now(UTC)
        start = now.replace(minute=0, second=0, microsecond=0) + timedelta(minutes=30 * random.randint(2, 48))
        end = start + timedelta(minutes=30 * random.randint(1, 4))
        body = {"team": self.person["team"], "start": start.isoformat(), "end": end.isoformat(),
                "gpu_model": random.choice(PEOPLE["models"]), "count": 1, "note": "load scenario"}
        with self.client.post("/api/v1/bookings/", json=body, name="book (API)", catch_response=True,
                              headers={"Authorization": f"Bearer {self.person['token']}"}) as answer:
            if answer.status_code not in (201, 409):
                answer.failure(f"booking answered {answer.status_code}: {answer.text[:200]}")
