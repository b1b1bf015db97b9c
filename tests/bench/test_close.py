"""bench/close.py: the month close ``make bench`` reports, run small."""

from accounting.models import DailyUsage, HourlyUsage, LedgerEntry, PricedDay, Statement
from bench.close import bench_close, print_close


def test_it_times_the_close_beside_a_group_by_and_leaves_nothing_behind(db, capsys):
    result = bench_close(gpus=16, runs=1)
    assert result["gpus"] == 16 and result["teams"] == 20 and result["days"] == 30
    assert result["daily_rows"] > 16 * 30  # several states and teams per GPU-day
    assert result["entries"] > 0 and result["overflow_entries"] > 0  # the five teams ran over their quotas
    assert result["crossing_days"] >= 1
    assert result["close_s"] > 0 and result["group_by_s"] > 0
    for table in (DailyUsage, HourlyUsage, LedgerEntry, Statement, PricedDay):
        assert not table.objects.exists()
    print_close([result])
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[:3] for line in out if "close_period" in line] == [["close_period", "16", "GPUs"]]
    assert any(line.strip().startswith("one GROUP BY over it") for line in out)
