"""bench/soak.py, short: 100 simulated nodes × 8 GPUs (a real ``agents fleet`` process, every node its own
port, token and spool), a real Celery worker and beat on the test database and a Redis of the test's own
(no other session's worker may take its collections), for about a minute; every record the agents
produced must be stored once."""

from pathlib import Path

import pytest
import redis

from bench.soak import run_soak, task_seconds
from bench.stack import free_port_range, plan_fleets, register_fleets
from config.embedded import start_redis
from tests.cluster.telemetry.e2e_helpers import worker_database_url

REPO_ROOT = Path(__file__).resolve().parents[2]
NODES, GPUS, INTERVAL_S = 100, 8, 10


@pytest.mark.django_db(transaction=True)
def test_it_stores_every_record_that_a_hundred_nodes_produce(tmp_path):
    redis_url = start_redis(tmp_path / "redis")
    fleets = plan_fleets(nodes=NODES, processes=2, base_port=free_port_range(NODES))
    tokens = register_fleets(fleets, tmp_path, gpus=GPUS)
    try:
        result = run_soak(fleets=fleets, tokens=tokens, run_dir=tmp_path, base_dir=REPO_ROOT,
                          database_url=worker_database_url(), minutes=0.5, gpus=GPUS, interval_s=INTERVAL_S,
                          collect_every_s=10, environment={"REDIS_URL": redis_url})
    finally:
        redis.Redis.from_url(redis_url).shutdown(nosave=True)

    balance = result["balance"]
    assert result["nodes"] == NODES and result["fleets"] == 2
    assert balance["wrong"] == [], balance
    assert balance["rejected"] == 0
    assert balance["stored"] == balance["produced"]
    # Something real was measured: every GPU sampled before and through the window (30 s, at least 2 whole
    # intervals), and the collect tasks ran.
    assert balance["produced"] >= NODES * GPUS * 4
    assert result["rows_in_window"] >= NODES * GPUS * 2
    assert len(result["tasks"]["cluster.tasks.collect_nodes"]) >= 4
    assert result["samples"]["lag"] and max(result["samples"]["lag"]) < 120
    assert set(result["cores"]) >= {"agents-1", "agents-2", "worker", "beat"}
    assert result["cores"]["worker"] > 0


def test_it_reads_task_times_from_a_worker_log():
    log = (
        "[2026-11-02 00:00:01,000: INFO/ForkPoolWorker-1] Task cluster.tasks.collect_nodes[3f2a-9] succeeded in "
        "1.25s: None\n"
        "[2026-11-02 00:00:02,000: INFO/MainProcess] Task cluster.tasks.rollup_pending[77] received\n"
        "[2026-11-02 00:00:03,000: INFO/ForkPoolWorker-2] Task cluster.tasks.rollup_pending[77] succeeded in "
        "0.5s: {'minute_buckets': 3}\n"
        "[2026-11-02 00:00:04,000: INFO/ForkPoolWorker-1] Task cluster.tasks.collect_nodes[3f2a-a] succeeded in "
        "2.0s: None\n"
    )
    assert task_seconds(log) == {"cluster.tasks.collect_nodes": [1.25, 2.0],
                                 "cluster.tasks.rollup_pending": [0.5]}
