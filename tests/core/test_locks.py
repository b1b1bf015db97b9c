import threading
import time

import pytest
from django.db import connection, transaction

from core.locks import advisory_lock, wait_turn


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


@pytest.mark.django_db(transaction=True)
def test_a_writer_waits_for_its_turn_until_the_holder_commits():
    """The second writer's turn comes only when the first one's transaction ends, never before."""
    held, order = threading.Event(), []

    def first():
        with transaction.atomic():
            wait_turn("cardhour.test.turn")
            wait_turn("cardhour.test.turn")  # taken again in one transaction: no wait
            held.set()
            time.sleep(0.5)
            order.append("first commits")
        connection.close()

    thread = threading.Thread(target=first)
    thread.start()
    assert held.wait(10)
    with transaction.atomic():
        wait_turn("cardhour.test.turn")
        order.append("second's turn")
    thread.join(10)
    assert order == ["first commits", "second's turn"]


@pytest.mark.django_db(transaction=True)
def test_a_turn_outside_a_transaction_is_refused():
    """In autocommit the lock would end with its own statement: a turn that protects nothing."""
    with pytest.raises(RuntimeError, match="inside one"):
        wait_turn("cardhour.test.turn")
