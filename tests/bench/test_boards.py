"""bench/boards.py: the daily board's figures ``make bench`` reports, run small."""

from accounting.models import DailyUsage, HourlyUsage
from bench.boards import bench_boards, bench_boards_at_scale, print_boards, print_boards_at_scale
from cluster.models import Job, MinuteRollup, Node


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


def test_at_scale_it_times_the_board_by_pool_then_a_pools_and_a_nodes_board(db, capsys, settings):
    """The 10,000-GPU size run small: 4 nodes of 2 GPUs in 2 pools, the rows' limits set so that the board has a
    row per pool, a pool's board a row per node and a node's board a row per GPU, as at 10,000 GPUs."""
    settings.CARDHOUR_BOARD_GPU_ROWS = 2
    settings.CARDHOUR_BOARD_NODE_ROWS = 1
    result = bench_boards_at_scale(nodes=4, gpus_per_node=2, pools=2, teams=3, days=3, runs=1)
    assert result["gpus"] == 8 and result["nodes"] == 4
    assert result["levels"] == {"page": "pool", "pool": "node", "node": "gpu"} and result["json_level"] == "pool"
    assert result["json_rows"] == 2
    for part in ("page", "json", "pool", "node"):
        assert result[part]["ms"] > 0 and result[part]["queries"] > 5
    assert result["daily_rows"] > 0 and result["hourly_rows"] > 0
    assert not HourlyUsage.objects.exists() and not Job.objects.exists() and not Node.objects.exists()
    print_boards_at_scale(result)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("daily board 10k")]
    assert [line.split()[3] for line in lines] == ["page", "JSON", "pool", "node"]
    assert all(" ms " in line and "baseline GROUP BY" in line for line in lines)
