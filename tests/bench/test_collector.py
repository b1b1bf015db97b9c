"""bench/telemetry.py: the collector's two paths beside raw COPY, run small."""

from bench.__main__ import _print_collector
from bench.telemetry import bench_collector
from cluster.models import Sample


def test_both_paths_store_every_record_and_the_figures_are_printed(transactional_db, capsys):
    result = bench_collector(records=40_000, gpus=20)  # two pages
    assert result["records"] == 40_000  # each path asserted every page stored whole
    assert set(result["stages_s"]) >= {"decode", "check+copy", "marks", "commit"}
    assert "sql validate+upsert" in result["sql_stages_s"]
    assert result["collector_vs_binary_copy"] > 0 and result["sql_path_vs_binary_copy"] > 0
    assert not Sample.objects.exists()
    _print_collector(result)
    out = capsys.readouterr().out
    assert "collector / binary COPY" in out and "(aim ≥ 0.5)" in out
