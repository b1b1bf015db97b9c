import threading

import pytest
from django.db import connection

from core.locks import advisory_lock


@pytest.mark.django_db(transaction=True)
def test_a_periodic_lock_is_held_by_one_process_at_a_time():
    held, release, results = threading.Event(), threading.Event(), {}

    def first():
        with advisory_lock("cardhour.test") as locked:
            results["first"] = locked
            held.set()
            release.wait(10)
        connection.close()

    thread = threading.Thread(target=first)
    thread.start()
    assert held.wait(10)
    with advisory_lock("cardhour.test") as locked:
        results["second"] = locked
    release.set()
    thread.join(10)
    with advisory_lock("cardhour.test") as locked:
        results["after"] = locked
    assert results == {"first": True, "second": False, "after": True}
