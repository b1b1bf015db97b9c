from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from agents.backends.replay import replay_gpu_uuid
from cluster.models import Gpu, Node, Sample

pytestmark = pytest.mark.django_db

GOOD = """ts,node,gpu,util_gpu,mem_used_mib,power_w
2026-11-02T08:00:10+00:00,imp-01,0,50,1000,300
2026-11-02T08:00:20+00:00,imp-01,0,60,1000,310
2026-11-02T08:00:30+00:00,imp-01,0,70,1000,320
1793606430,imp-01,GPU-explicit-uuid,20,,
1793606440,imp-01,GPU-explicit-uuid,25,,
"""


def run(tmp_path, text, *args):
    path = tmp_path / "samples.csv"
    path.write_text(text)
    out, err = StringIO(), StringIO()
    call_command("import_samples", str(path), *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_it_imports_and_creates_unknown_nodes_and_gpus(tmp_path):
    out, _err = run(tmp_path, GOOD)
    assert "rows read 5, imported 5, already present 0, rejected 0" in out
    node = Node.objects.get(hostname="imp-01")
    assert set(Gpu.objects.filter(node=node).values_list("uuid", flat=True)) == {
        replay_gpu_uuid("imp-01", 0), "GPU-explicit-uuid",
    }
    sample = Sample.objects.get(gpu__uuid=replay_gpu_uuid("imp-01", 0), ts__second=20)
    # interval_s inferred from the median gap (10 s); energy from power × interval, as the replay does.
    assert (sample.interval_s, sample.util_gpu, sample.energy_j) == (10, 60.0, 3100.0)


def test_importing_the_same_file_twice_changes_nothing(tmp_path):
    run(tmp_path, GOOD)
    before = list(Sample.objects.order_by("gpu", "ts").values_list("gpu", "ts", "util_gpu"))
    out, _err = run(tmp_path, GOOD)
    assert "imported 0, already present 5" in out
    assert list(Sample.objects.order_by("gpu", "ts").values_list("gpu", "ts", "util_gpu")) == before


BAD = GOOD + """2026-11-02T08:00:40,imp-01,0,70,,
2026-11-02T08:00:50+00:00,imp-01,0,170,,
not-a-time,imp-01,0,10,,
2026-11-02T08:01:00+00:00,imp-01,0,abc,,
"""


def test_bad_rows_are_reported_by_line_and_the_good_kept(tmp_path):
    out, err = run(tmp_path, BAD)
    assert "line 7: parse: ts: an ISO-8601 time needs a UTC offset" in err
    assert "line 8: util_gpu: above 100" in err
    assert "line 9: parse: ts: 'not-a-time' is not ISO-8601 or epoch seconds" in err
    assert "line 10: parse: util_gpu: 'abc' is not a number" in err
    assert "rows read 9, imported 5, already present 0, rejected 4" in out
    assert Sample.objects.count() == 5


def test_strict_rejects_the_whole_file(tmp_path):
    with pytest.raises(CommandError, match="--strict: 4 bad row"):
        run(tmp_path, BAD, "--strict")
    assert not Sample.objects.exists()


def test_strict_rejects_a_row_only_the_database_refuses(tmp_path):
    text = GOOD + "2026-11-02T08:00:50+00:00,imp-01,0,170,,\n"
    with pytest.raises(CommandError, match="line 7: util_gpu: above 100"):
        run(tmp_path, text, "--strict")
    assert not Sample.objects.exists()


def test_a_missing_column_is_named(tmp_path):
    with pytest.raises(CommandError, match="lacks the required column\\(s\\) util_gpu"):
        run(tmp_path, "ts,node,gpu\n1,a,0\n")


GPM_CSV = """ts,node,gpu,util_gpu,power_w,sm_active,sm_occupancy,tensor_active,dram_active,fp16_active,fp32_active,fp64_active,nvlink_rx_mibs,nvlink_tx_mibs,pcie_rx_mibs,pcie_tx_mibs
2026-11-02T08:00:10+00:00,gpm-01,0,90,600,81.5,40,55,37,12.5,3,0,20480,19000.5,1200,640
2026-11-02T08:00:20+00:00,gpm-01,0,90,600,,,,,,,,,,,
2026-11-02T08:00:30+00:00,gpm-01,0,90,600,70,40,55,37,12.5,3,,20480,19000.5,1200,640
2026-11-02T08:00:40+00:00,gpm-01,0,90,600,100.5,40,55,37,12.5,3,0,20480,19000.5,1200,640
2026-11-02T08:00:50+00:00,gpm-01,0,90,600,70,40,55,37,12.5,3,0,-5,19000.5,1200,640
2026-11-02T08:01:00+00:00,gpm-01,0,90,600,70,40,busy,37,12.5,3,0,20480,19000.5,1200,640
"""
GPM_COLUMNS = GPM_CSV.splitlines()[0].split(",")[5:]


def gpm_of(second: int) -> dict:
    return Sample.objects.values(*GPM_COLUMNS).get(ts__minute=0, ts__second=second)


def test_gpm_columns_are_imported_blank_as_null_and_bad_lines_reported(tmp_path):
    out, err = run(tmp_path, GPM_CSV)
    assert "rows read 6, imported 3, already present 0, rejected 3" in out
    assert gpm_of(10) == {
        "sm_active": 81.5, "sm_occupancy": 40.0, "tensor_active": 55.0, "dram_active": 37.0, "fp16_active": 12.5,
        "fp32_active": 3.0, "fp64_active": 0.0, "nvlink_rx_mibs": 20480.0, "nvlink_tx_mibs": 19000.5,
        "pcie_rx_mibs": 1200.0, "pcie_tx_mibs": 640.0,
    }
    assert set(gpm_of(20).values()) == {None}  # blank: unknown, never 0
    assert gpm_of(30)["fp64_active"] is None
    assert gpm_of(30)["sm_active"] == 70.0
    assert "line 5: sm_active: above 100" in err
    assert "line 6: nvlink_rx_mibs: below 0" in err
    assert "line 7: parse: tensor_active: 'busy' is not a number" in err


def test_a_file_without_gpm_columns_stores_them_null(tmp_path):
    run(tmp_path, GOOD)
    assert set(Sample.objects.values_list(*GPM_COLUMNS).distinct()) == {(None,) * len(GPM_COLUMNS)}


def test_strict_refuses_a_gpm_value_out_of_range(tmp_path):
    with pytest.raises(CommandError, match="line 5: sm_active: above 100"):
        run(tmp_path, GPM_CSV, "--strict")
    assert not Sample.objects.exists()


def test_gpm_columns_roll_up(tmp_path):
    from cluster.models import MinuteRollup

    run(tmp_path, GPM_CSV)  # rollups are brought up to date in the command's process
    minute = MinuteRollup.objects.get(bucket__minute=0)
    # 10 s records at 08:00:10, :20 (no GPM) and :30 own 30 s; two of them have an SM activity.
    assert (minute.covered_s, minute.gpm_covered_s) == (30, 20)
    assert minute.sm_active_mean == pytest.approx((81.5 + 70) / 2)
    assert minute.fp64_active_mean == 0.0
