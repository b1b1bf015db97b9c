"""bench/agent.py: the figures ``make bench`` reports."""

from bench.agent import measure_agent


def test_it_measures_cpu_per_cycle_and_peak_rss():
    result = measure_agent(cycles=30, gpus=8)
    assert result["agent_records_served"] >= 30 * 8
    assert result["agent_exit_code"] == 0
    assert 0 < result["cycle_cpu_ms"] < 100
    assert 5 < result["agent_peak_rss_mib"] < 500
    assert result["agent_cpu_s"] > 0
