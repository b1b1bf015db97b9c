"""The chaos harness's own logic (chaos/verdicts.py): the produced-against-stored comparison, rows against a
clean run, the pages' answers during a fault, the worker log's runs per period, and the verdict lines. The
minutes-long scenarios themselves run with ``make chaos``."""

import pytest

from chaos.__main__ import SCENARIOS, chosen
from chaos.verdicts import (
    FAIL,
    PASS,
    SKIP,
    GpuSpan,
    NodeCount,
    Probe,
    Verdict,
    count_problems,
    count_totals,
    exit_code,
    gap_problems,
    probe_problems,
    row_differences,
    task_runs,
    verdict,
)


def test_it_passes_a_node_whose_rows_are_its_records():
    counts = [NodeCount("n1", produced=120, cursor=120, stored=118, distinct=118, rejected=2)]
    assert count_problems(counts) == []
    assert count_totals(counts) == "produced=120 stored=118 rejected=2 doubled=0"


def test_it_names_lost_doubled_and_uncollected_records():
    lost = NodeCount("n1", produced=100, cursor=100, stored=97, distinct=97)
    doubled = NodeCount("n2", produced=100, cursor=100, stored=102, distinct=100)
    behind = NodeCount("n3", produced=100, cursor=90, stored=90, distinct=90)
    assert count_problems([lost, doubled, behind]) == [
        "n1: 3 of 100 records below the cursor lost",
        "n2: 2 rows doubled by (gpu, ts)",
        "n2: 2 rows more than records below the cursor",
        "n3: 10 records not collected yet",
    ]
    assert count_problems([behind], caught_up=False) == []


def test_it_counts_records_the_spool_dropped_as_a_problem_not_a_loss_below_the_cursor():
    dropped = NodeCount("n1", produced=50, cursor=50, stored=45, distinct=45, dropped=5)
    assert count_problems([dropped]) == ["n1: the agent's spool dropped 5 records"]


def test_a_cursor_beyond_the_agent_is_a_problem():
    assert count_problems([NodeCount("n1", produced=10, cursor=12, stored=12, distinct=12)]) == [
        "n1: cursor 12 beyond the agent's last seq 10"]


def test_it_finds_holes_in_a_gpus_samples():
    whole = GpuSpan("GPU-a", count=13, first_ts=1000.0, last_ts=1060.0, interval_s=5)
    holed = GpuSpan("GPU-b", count=11, first_ts=1000.0, last_ts=1060.0, interval_s=5)
    assert gap_problems([whole, holed]) == ["GPU-b: 2 samples missing between its first and last"]


def test_it_compares_rows_as_multisets():
    clean = [("d1", 1, "busy", 10), ("d1", 2, "idle", 5), ("d1", 2, "idle", 5)]
    assert row_differences(clean, list(reversed(clean))) == (0, 0)
    assert row_differences(clean, clean[:2]) == (1, 0)
    assert row_differences(clean, [*clean, ("d2", 1, "busy", 1)]) == (0, 1)
    assert row_differences(clean, [("d1", 1, "busy", 11), *clean[1:]]) == (1, 1)


def test_a_readable_503_page_passes_and_a_traceback_fails():
    page = Probe("/", 503, "text/html; charset=utf-8", "<!doctype html><html><body>Back soon</body></html>")
    traceback = Probe("/jobs/", 503, "text/html", "<html>Traceback (most recent call last): psycopg</html>")
    plain = Probe("/inventory/", 503, "text/plain", "Service unavailable")
    assert probe_problems([page], status=503, html=True) == []
    assert probe_problems([page, traceback, plain], status=503, html=True) == [
        "/inventory/ answered 503 without an HTML page",
        "/jobs/ showed a traceback or the driver's error",
    ]


def test_a_page_that_stopped_answering_or_answered_otherwise_fails():
    assert probe_problems([Probe("/", 0), Probe("/jobs/", 500, "text/html", "<html></html>")], status=200) == [
        "/ answered nothing, not 200", "/jobs/ answered 500, not 200"]
    assert probe_problems([Probe("/", 0, body="ReadTimeout")], status=200) == ["/ answered nothing (ReadTimeout), not 200"]
    assert probe_problems([], status=200) == ["no page was probed"]


WORKER_LOG = """\
[2026-12-06 21:00:00,001: INFO/MainProcess] Task cluster.tasks.collect_all[1a-2b] received
[2026-12-06 21:00:00,050: INFO/ForkPoolWorker-1] Task cluster.tasks.collect_all[1a-2b] succeeded in 0.04s: 3
[2026-12-06 21:00:01,001: INFO/MainProcess] Task cluster.tasks.collect_all[3c-4d] received
[2026-12-06 21:00:01,050: INFO/ForkPoolWorker-1] Task cluster.tasks.collect_all[3c-4d] succeeded in 0.01s: 0
[2026-12-06 21:00:02,001: INFO/MainProcess] Task accounting.tasks.usage_aggregate[5e] received
[2026-12-06 21:00:02,900: INFO/ForkPoolWorker-1] Task accounting.tasks.usage_aggregate[5e] succeeded in 0.9s: {'marks': 2}
[2026-12-06 21:00:03,001: INFO/MainProcess] Task accounting.tasks.usage_aggregate[6f] received
[2026-12-06 21:00:03,010: INFO/ForkPoolWorker-1] Task accounting.tasks.usage_aggregate[6f] succeeded in 0.0s: {}
[2026-12-06 21:00:04,001: INFO/MainProcess] Task accounting.tasks.webhook_sweep[7a] received
[2026-12-06 21:00:04,010: INFO/ForkPoolWorker-1] Task accounting.tasks.webhook_sweep[7a] succeeded in 0.0s: {'skipped': 'period done'}
[2026-12-06 21:00:05,001: INFO/MainProcess] Task accounting.tasks.webhook_sweep[8b] received
[2026-12-06 21:00:05,010: INFO/ForkPoolWorker-1] Task accounting.tasks.webhook_sweep[8b] succeeded in 0.0s: {'due': 0, 'sent': 0}
[2026-12-06 21:00:06,001: INFO/MainProcess] Task accounting.tasks.webhook_sweep[9c] received
[2026-12-06 21:00:06,010: INFO/ForkPoolWorker-1] Task accounting.tasks.webhook_sweep[9c] succeeded in 0.0s: {'due': 1, 'sent': 1}
"""


def test_it_reads_runs_received_and_runs_that_did_work_from_the_worker_log():
    assert task_runs(WORKER_LOG.splitlines()) == {
        "cluster.tasks.collect_all": (2, 1),
        "accounting.tasks.usage_aggregate": (2, 1),
        "accounting.tasks.webhook_sweep": (3, 1),
    }


def test_the_verdict_line_and_the_exit_code():
    passed = verdict("redis-outage", [], "produced=10 stored=10")
    failed = verdict("kill-close", [f"problem {n}" for n in range(7)], "rows=3")
    assert passed == Verdict("redis-outage", PASS, "produced=10 stored=10")
    assert failed.outcome == FAIL
    assert passed.line() == "PASS  redis-outage      produced=10 stored=10"
    assert failed.line() == ("FAIL  kill-close        problem 0; problem 1; problem 2; problem 3; problem 4; "
                             "and 2 more | rows=3")
    assert exit_code([passed]) == 0
    assert exit_code([passed, failed]) == 1
    assert exit_code([passed, Verdict("clock-skew", SKIP, "not ours")]) == 0
    assert exit_code([]) == 1  # nothing ran: nothing proven


def test_only_takes_names_and_prefixes_in_the_scenarios_order():
    assert chosen("") == list(SCENARIOS)
    assert chosen("kill-close,redis") == ["redis-outage", "kill-close"]
    assert chosen("kill") == ["kill-collect", "kill-rollup", "kill-usage", "kill-close"]
    with pytest.raises(SystemExit, match="no scenario named mongo"):
        chosen("mongo")
