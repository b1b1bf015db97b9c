"""bench/boards.py: the daily board's figures ``make bench`` reports, run small."""

from accounting.models import DailyUsage, HourlyUsage
from bench.boards import bench_boards, print_boards
from cluster.models import Job, MinuteRollup


def test_it_times_the_board_page_and_json_and_leaves_nothing_behind(db, capsys):
    result = bench_boards(nodes=2, gpus_per_node=4, teams=3, days=4, runs=2)
    assert result["gpus"] == 8
    for part in ("page", "json"):
        assert result[part]["ms"] > 0
        assert result[part]["queries"] > 5
    assert result["baseline_ms"] > 0
    assert result["heatmap_cells"] == 8 * 24  # every GPU-hour of a full day
    assert result["idle_allocations"] > 0
    assert result["always_full"] == 1  # the GPU at k % 50 = 0
    assert result["long_idle"] >= 1  # the one never allocated, idle for all 4 days
    assert result["daily_rows"] > 0 and result["hourly_rows"] > 0
    assert not DailyUsage.objects.exists() and not HourlyUsage.objects.exists()
    assert not MinuteRollup.objects.exists() and not Job.objects.exists()
    print_boards(result)
    out = capsys.readouterr().out.splitlines()
    lines = [line for line in out if line.startswith("daily board")]
    assert [line.split()[2] for line in lines] == ["page", "JSON"]
    assert all(" ms " in line for line in lines)
    periods = [line for line in out if line.startswith(("week view", "month view", "profile"))]
    assert [line.split()[0] for line in periods] == ["week", "month", "profile"] and all(" ms " in p for p in periods)
    for part in ("week", "month", "profile"):
        assert result[part]["ms"] > 0 and result[part]["queries"] > 5
