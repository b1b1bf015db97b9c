"""bench/workers.py: collection and rollups by one worker process, then two, run small."""

from bench.workers import bench_workers, print_workers
from cluster.models import DirtyBucket, MinuteRollup, Sample


def test_one_and_two_processes_store_and_roll_up_the_same_records(transactional_db, capsys):
    result = bench_workers(nodes=4, records=4 * 8 * 30, processes=(1, 2))  # 30 records per GPU: 5 minutes
    one, two = result["runs"]
    assert (one["processes"], two["processes"]) == (1, 2)
    assert one["records"] == two["records"] == 4 * 8 * 30  # every record stored once by each run
    # Every GPU's 5 minutes rolled up (+ their hours), the same by one process or two.
    assert one["buckets"] >= 4 * 8 * 5 and two["buckets"] >= one["buckets"]
    assert one["collect_vs_one"] == 1.0 and two["collect_vs_one"] > 0
    for table in (Sample, DirtyBucket, MinuteRollup):
        assert not table.objects.exists()
    print_workers(result)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines if "collect" in line and "records" in line] == [["1", "process"],
                                                                                              ["2", "processes"]]
