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
