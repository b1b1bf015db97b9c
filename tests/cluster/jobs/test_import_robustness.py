"""Every importer, on any bad line, reports that line with its reason and keeps the rest (issue 12): wrong
encodings, binary garbage, NUL bytes, huge fields, times outside the supported window, NaN and infinite
numbers, GPU indices a node does not have, host lists that would expand forever. Nothing ends in a
traceback, nothing is created for a rejected row, and ``--strict`` refuses the file with nothing written."""

import re
import time
from datetime import UTC, datetime
from decimal import Decimal
from io import StringIO

import pytest
import time_machine
from django.core.management import CommandError, call_command

from cluster.jobs.imports.sacct import expand_hostlist, hostlist_size
from cluster.models import Gpu, GpuModel, IdentityKind, Job, Node, Sample, TeamIdentity
from core.import_lines import MAX_LINE_BYTES
from teams.models import Team

pytestmark = [pytest.mark.django_db, pytest.mark.clock]

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

SAMPLES = b"ts,node,gpu,util_gpu,mem_used_mib,power_w\n"
GOOD_SAMPLE = b"2026-11-02T08:00:10Z,imp-01,0,50,1000,300\n"
LAST_SAMPLE = b"2026-11-02T08:00:30Z,imp-01,0,70,1000,320\n"

JOBS = b"job_id,user,team,project,gpu_count,gpu_model,submit_time,start_time,end_time,state,node,gpu_indices\n"
GOOD_JOB = b"g1,ann,alpha,,1,H200,,2026-11-02T08:00:00Z,2026-11-02T09:00:00Z,completed,,\n"
LAST_JOB = b"g2,ann,alpha,,1,H200,,2026-11-02T10:00:00Z,2026-11-02T11:00:00Z,completed,,\n"

SACCT = b"JobID|User|Account|Submit|Start|End|State|AllocTRES|NodeList\n"
GOOD_RUN = b"101|ann|alpha|2026-11-02T08:00:00|2026-11-02T08:00:00|2026-11-02T09:00:00|COMPLETED|gres/gpu=1|h200-a\n"
LAST_RUN = b"102|ann|alpha|2026-11-02T10:00:00|2026-11-02T10:00:00|2026-11-02T11:00:00|COMPLETED|gres/gpu=1|h200-a\n"


@pytest.fixture(autouse=True)
def frozen(settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "UTC"
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def cast(team_a, small_cluster):
    return {"a": team_a, **small_cluster}


def run(tmp_path, command, data: bytes, *args):
    path = tmp_path / "input"
    path.write_bytes(data)
    out, err = StringIO(), StringIO()
    call_command(command, str(path), "--defer", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def samples(tmp_path, bad: bytes, *args):
    """Line 2 good, line 3 ``bad``, line 4 good."""
    return run(tmp_path, "import_samples", SAMPLES + GOOD_SAMPLE + bad + LAST_SAMPLE, *args)


def jobs(tmp_path, bad: bytes, *args):
    return run(tmp_path, "import_jobs", JOBS + GOOD_JOB + bad + LAST_JOB, *args)


def sacct(tmp_path, bad: bytes, *args):
    return run(tmp_path, "import_sacct", SACCT + GOOD_RUN + bad + LAST_RUN, *args)


def kept_samples():
    return sorted(Sample.objects.values_list("util_gpu", flat=True))


def kept_jobs():
    return sorted(Job.objects.values_list("external_id", flat=True))


# ---- wrong encodings ------------------------------------------------------------------------------------

def test_latin1_bytes_are_replaced_and_reported_and_the_row_kept_when_it_still_reads(tmp_path, cast):
    out, err = jobs(tmp_path, "l1,jos\xe9,alpha,,1,H200,,2026-11-02T08:00:00Z,2026-11-02T09:00:00Z,completed,,\n"
                    .encode("latin-1"))
    assert err == "line 3: warning: not UTF-8 (byte 0xe9 at byte 7); undecodable bytes replaced with U+FFFD\n"
    assert "rows read 3, imported 3" in out
    assert Job.objects.get(external_id="l1").user == "jos\ufffd"


def test_latin1_bytes_in_a_sample_reject_the_row_they_spoil(tmp_path):
    out, err = samples(tmp_path, "2026-11-02T08:00:20Z,n\xf6de,0,60,,\n".encode("latin-1"))
    assert "line 3: parse: node: 'n\ufffdde' is not a hostname" in err
    assert "line 3: warning: not UTF-8 (byte 0xf6" in err
    assert "rows read 3, imported 2, already present 0, rejected 1" in out
    assert kept_samples() == [50.0, 70.0] and list(Node.objects.values_list("hostname", flat=True)) == ["imp-01"]


def test_latin1_bytes_in_sacct_are_replaced_by_line(tmp_path, cast):
    out, err = sacct(tmp_path, "103|ren\xe9|alpha|2026-11-02T08:00:00|2026-11-02T08:00:00|2026-11-02T09:00:00|"
                     "COMPLETED|gres/gpu=1|h200-a\n".encode("latin-1"))
    assert err.startswith("line 3: warning: not UTF-8 (byte 0xe9")
    assert "rows read 3, imported 3" in out and Job.objects.get(external_id="103").user == "ren\ufffd"


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be"])
def test_a_utf16_file_with_a_byte_order_mark_is_read(tmp_path, cast, encoding):
    text = (JOBS + GOOD_JOB + LAST_JOB).decode()
    data = text.encode(encoding) if encoding == "utf-16" else b"\xfe\xff" + text.encode(encoding)
    out, err = run(tmp_path, "import_jobs", data)
    assert err == "" and "rows read 2, imported 2" in out and "read as UTF-16" in out
    assert kept_jobs() == ["g1", "g2"]


@pytest.mark.parametrize("command", ["import_samples", "import_jobs", "import_sacct"])
def test_a_utf16_file_without_a_byte_order_mark_is_refused_with_how_to_fix_it(tmp_path, cast, command):
    data = {"import_samples": SAMPLES + GOOD_SAMPLE, "import_jobs": JOBS + GOOD_JOB, "import_sacct": SACCT + GOOD_RUN}
    with pytest.raises(CommandError, match=re.escape("line 1 holds NUL bytes: the file is binary, or UTF-16 without a "
                                                     "byte-order mark. Save it as UTF-8")):
        run(tmp_path, command, data[command].decode().encode("utf-16-le"))
    assert not Sample.objects.exists() and not Job.objects.exists()


# ---- binary garbage, NUL bytes, huge fields ----------------------------------------------------------------

GARBAGE = bytes(b for b in range(256) if b not in b"\r\n") + b"\n"  # one line of every other byte


def test_garbage_across_lines_is_reported_line_by_line(tmp_path, cast):
    out, err = jobs(tmp_path, bytes(range(256)) + b"\n")  # holds \n and \r: two lines, both bad
    assert err.splitlines() == [
        "line 3: holds NUL bytes (binary data?)",
        "line 4: csv: new-line character seen in unquoted field - do you need to open the file in universal-newline mode?",
    ]
    assert "rejected 2" in out and kept_jobs() == ["g1", "g2"]


def test_a_line_of_binary_garbage_is_rejected_in_each_importer(tmp_path, cast):
    _out, err = samples(tmp_path, GARBAGE)
    assert err == "line 3: holds NUL bytes (binary data?)\n" and kept_samples() == [50.0, 70.0]
    _out, err = jobs(tmp_path, GARBAGE)
    assert err == "line 3: holds NUL bytes (binary data?)\n" and kept_jobs() == ["g1", "g2"]
    out, err = sacct(tmp_path, GARBAGE)
    assert err == "line 3: holds NUL bytes (binary data?)\n" and "imported 2" in out


def test_garbage_without_nul_bytes_is_replaced_and_rejected_by_what_it_spoils(tmp_path, cast):
    out, err = jobs(tmp_path, bytes(range(128, 256)) + b",x\n")
    assert err.splitlines() == ["line 3: gpu_count: is required (0 for a job without GPUs)",
                                "line 3: warning: not UTF-8 (byte 0x80 at byte 1); undecodable bytes replaced with U+FFFD"]
    assert "rejected 1" in out and kept_jobs() == ["g1", "g2"]


def test_a_nul_byte_rejects_its_row(tmp_path, cast):
    out, err = jobs(tmp_path, b"n1,ann\x00,alpha,,1,H200,,,,pending,,\n")
    assert err == "line 3: holds NUL bytes (binary data?)\n"
    assert "rows read 3, imported 2, updated 0, unchanged 0, skipped 0, rejected 1" in out
    _out, err = samples(tmp_path, b"2026-11-02T08:00:20Z,imp-01,0,6\x000,,\n")
    assert err == "line 3: holds NUL bytes (binary data?)\n" and kept_samples() == [50.0, 70.0]


def test_a_50_mb_field_rejects_its_row_without_holding_it(tmp_path, cast):
    huge = b"h1,ann,alpha,,1,H200,,,,pending,,\"" + b"x" * 50_000_000 + b"\"\n"
    started = time.perf_counter()
    out, err = jobs(tmp_path, huge)
    assert err == f"line 3: longer than {MAX_LINE_BYTES:,} bytes (skipped)\n"
    assert "rows read 3, imported 2" in out and kept_jobs() == ["g1", "g2"]
    assert time.perf_counter() - started < 20
    _out, err = sacct(tmp_path, b"104|" + b"u" * 50_000_000 + b"|alpha\n")
    assert err == f"line 3: longer than {MAX_LINE_BYTES:,} bytes (skipped)\n"


def test_a_field_over_the_csv_limit_rejects_its_row(tmp_path):
    out, err = samples(tmp_path, b'2026-11-02T08:00:20Z,imp-01,0,"' + b"9" * 200_000 + b'",,\n')
    assert err == "line 3: parse: field larger than field limit (131072)\n"
    assert "rejected 1" in out and kept_samples() == [50.0, 70.0]


# ---- times outside the supported window ---------------------------------------------------------------

WINDOW = "is outside the supported window 2000-01-01T00:00:00Z … 2100-01-01T00:00:00Z"


@pytest.mark.parametrize("ts", [b"0001-01-01T00:00:00Z", b"9999-12-31T23:59:59-05:00", b"-62135596800", b"1e309"])
def test_a_sample_time_outside_the_window_is_rejected(tmp_path, ts):
    out, err = samples(tmp_path, ts + b",imp-01,0,60,,\n")
    assert err == f"line 3: ts: {ts.decode()!r} {WINDOW}\n"
    assert "rejected 1" in out and kept_samples() == [50.0, 70.0]


@pytest.mark.parametrize(("start", "reason"), [
    (b"0001-01-01T00:00:00Z", f"start_time: 0001-01-01T00:00:00+00:00 {WINDOW}"),
    (b"9999-12-31T23:59:59Z", f"start_time: 9999-12-31T23:59:59+00:00 {WINDOW}"),
    (b"9999-12-31T23:59:59-05:00", f"start_time: '9999-12-31T23:59:59-05:00' {WINDOW}"),
    (b"-99999999999999", f"start_time: '-99999999999999' {WINDOW}"),
])
def test_a_job_time_outside_the_window_is_rejected(tmp_path, cast, start, reason):
    out, err = jobs(tmp_path, b"t1,ann,alpha,,1,H200,," + start + b",,running,,\n")
    assert err.startswith(f"line 3: {reason}") and "rejected 1" in out and kept_jobs() == ["g1", "g2"]


def test_a_job_more_than_a_day_ahead_is_rejected(tmp_path, cast):
    _out, err = jobs(tmp_path, b"t2,ann,alpha,,1,H200,,2026-12-03T00:00:00Z,,running,,\n")
    assert err.startswith("line 3: start_time: 2026-12-03T00:00:00+00:00 is outside the supported window 2000-01-01 … "
                          "2026-12-02T12:00:00Z (now + 1 day)")


@pytest.mark.parametrize("start", [b"0001-01-01T00:00:00", b"9999-12-31T23:59:59", b"9999-12-31T23:59:59-05:00"])
def test_a_sacct_time_outside_the_window_is_rejected(tmp_path, cast, start, settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "Asia/Shanghai"  # year 1 at +08:00 would overflow to year 0
    out, err = sacct(tmp_path, b"105|ann|alpha|2026-11-02T08:00:00|" + start + b"|Unknown|RUNNING|gres/gpu=1|h200-a\n")
    assert err.startswith("line 3: Start: ") and "outside the supported window" in err
    assert "rejected 1" in out and Job.objects.count() == 2


def test_a_sacct_elapsed_beyond_reason_is_rejected(tmp_path, cast):
    out, err = run(tmp_path, "import_sacct", b"JobID|User|Account|Submit|Start|End|State|AllocTRES|NodeList|ElapsedRaw\n"
                   b"106|ann|alpha|2026-11-02T08:00:00|2026-11-02T08:00:00|Unknown|COMPLETED|gres/gpu=1|h200-a|"
                   + b"9" * 400 + b"\n")
    assert err.startswith("line 2: ElapsedRaw: '99999999999999999999' ends the run outside the supported window")
    assert "rejected 1" in out


# ---- numbers -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [b"nan", b"NaN", b"1e309", b"-inf"])
def test_a_nan_or_infinite_utilization_is_rejected(tmp_path, value):
    out, err = samples(tmp_path, b"2026-11-02T08:00:20Z,imp-01,0," + value + b",,\n")
    assert err == f"line 3: parse: util_gpu: {value.decode()!r} is not a finite number\n"
    assert "rows read 3, imported 2, already present 0, rejected 1" in out and kept_samples() == [50.0, 70.0]


def test_a_rejected_sample_creates_no_node_gpu_or_model(tmp_path):
    text = b"ts,node,gpu,util_gpu,gpu_model\n2026-11-02T08:00:10Z,new-01,0,170,NVIDIA B300\n"
    out, err = run(tmp_path, "import_samples", text)
    assert err == "line 2: util_gpu: above 100\n" and "nodes created 0, GPUs created 0" in out
    assert not Node.objects.exists() and not GpuModel.objects.exists()


# ---- GPU indices ---------------------------------------------------------------------------------------------

def test_a_sample_index_beyond_a_node_is_rejected(tmp_path):
    out, err = samples(tmp_path, b"2026-11-02T08:00:20Z,imp-01,99999,60,,\n")
    assert err == "line 3: gpu: index 99999 is beyond 63, the highest GPU index on a node\n"
    assert "GPUs created 1" in out and kept_samples() == [50.0, 70.0]


def test_a_sample_for_a_gpu_an_agent_node_lacks_is_rejected_and_its_own_gpus_are_used(tmp_path, cast):
    text = b"ts,node,gpu,util_gpu\n2026-11-02T08:00:10Z,h200-a,1,40\n2026-11-02T08:00:10Z,h200-a,2,40\n"
    out, err = run(tmp_path, "import_samples", text)
    assert err == "line 3: gpu: node h200-a has no GPU 2 (its agent registers its GPUs)\n"
    assert "imported 1" in out and "GPUs created 0" in out
    assert Sample.objects.get().gpu.uuid == "GPU-h200-a-1"  # the registered GPU, not a second one at index 1
    assert Gpu.objects.filter(node__hostname="h200-a").count() == 2


def test_a_sample_on_an_imported_node_creates_the_gpu_and_says_so(tmp_path):
    out, _err = samples(tmp_path, b"2026-11-02T08:00:20Z,imp-01,3,60,,\n")
    assert "nodes created: imp-01" in out and "GPUs created: imp-01/0 (unknown), imp-01/3 (unknown)" in out


def test_a_gpu_that_is_neither_index_nor_uuid_is_rejected(tmp_path):
    _out, err = samples(tmp_path, b"2026-11-02T08:00:20Z,imp-01,-1,60,,\n")
    assert err == "line 3: gpu: '-1' is neither an index on the node nor a GPU UUID (GPU-…)\n"


@pytest.mark.parametrize(("indices", "reason"), [
    (b"7", "gpu_indices: node h200-a has no GPU 7"),
    (b"0-99999999", "gpu_indices: '0-99999999' names an index beyond 63, the highest on a node"),
])
def test_a_job_index_beyond_the_node_is_rejected_without_expanding(tmp_path, cast, indices, reason):
    out, err = jobs(tmp_path, b"i1,ann,alpha,,1,,,2026-11-02T08:00:00Z,,running,h200-a," + indices + b"\n")
    assert err == f"line 3: {reason}\n" and "rejected 1" in out and kept_jobs() == ["g1", "g2"]


# ---- sacct host lists and teams ---------------------------------------------------------------------------

def test_a_nodelist_that_would_expand_forever_is_a_rejected_row(tmp_path, cast):
    assert hostlist_size("n[0-99999999]") == 100_000_000
    assert hostlist_size("r[1-2]n[01-10],login1") == 21
    with pytest.raises(ValueError, match="names 100,000,000 hosts, more than 100,000"):
        expand_hostlist("n[0-99999999]")
    started = time.perf_counter()
    out, err = sacct(tmp_path, b"107|ann|alpha|2026-11-02T08:00:00|2026-11-02T08:00:00|2026-11-02T09:00:00|COMPLETED|"
                     b"gres/gpu=1|n[0-99999999]\n")
    assert err == "line 3: NodeList: 'n[0-99999999]' names 100,000,000 hosts, more than 100,000\n"
    assert "imported 2" in out and time.perf_counter() - started < 10


ACCOUNTLESS = b"JobID|User|Submit|Start|End|State|AllocTRES\n" + b"".join(
    b"%d|%s|2026-11-02T08:00:00|2026-11-02T08:00:00|2026-11-02T09:00:00|COMPLETED|gres/gpu:a100_80=2\n" % (n, user)
    for n, user in ((201, b"ann"), (202, b"zed")))


def test_an_accountless_capture_maps_rows_by_user_identity(tmp_path, cast):
    TeamIdentity.objects.create(kind=IdentityKind.UNIX_USER, name="ann", team=cast["a"])
    out, err = run(tmp_path, "import_sacct", ACCOUNTLESS)
    assert err == ("line 3: User: 'zed' maps to no team (no Account; map the user with a unix user identity, or give "
                   "--default-team)\n")
    assert "unmapped users (no account; rows rejected; map them with a unix user identity, or --default-team): zed (1)" in out
    job = Job.objects.get()
    assert (job.external_id, job.team, job.gpu_count, job.gpu_model.name) == ("201", cast["a"], Decimal(2), "a100_80")
    assert "GPU models created" in out and "a100_80" in out


def test_the_default_team_takes_unmapped_users_and_accounts(tmp_path, cast, team_b):
    TeamIdentity.objects.create(kind=IdentityKind.UNIX_USER, name="ann", team=cast["a"])
    out, err = run(tmp_path, "import_sacct", ACCOUNTLESS, "--default-team", "beta")
    assert err == "" and "rows sent to the default team beta: 1" in out
    assert dict(Job.objects.values_list("external_id", "team__slug")) == {"201": "alpha", "202": "beta"}
    out, err = sacct(tmp_path, GOOD_RUN.replace(b"|ann|alpha|", b"|zed|physics|").replace(b"101", b"108"),
                     "--default-team", "beta")
    assert err == "" and Job.objects.get(external_id="108").team == team_b
    with pytest.raises(CommandError, match="--default-team: no team with slug 'nope'"):
        run(tmp_path, "import_sacct", ACCOUNTLESS, "--default-team", "nope")


# ---- nothing partial, --strict ----------------------------------------------------------------------------

def test_create_teams_creates_nothing_for_a_rejected_row(tmp_path, cast):
    out, err = jobs(tmp_path, b"c1,ann,newteam,newproj,1,B300,,2026-11-02T08:00:00Z,,asleep,,\n", "--create-teams")
    assert err.startswith("line 3: state: 'asleep' is not one of pending, running") and len(err.splitlines()) == 1
    assert "teams created" not in out and "GPU models created" not in out
    assert not Team.objects.filter(slug="newteam").exists() and not GpuModel.objects.filter(name="B300").exists()
    out, err = jobs(tmp_path, b"c1,ann,newteam,newproj,1,B300,,2026-11-02T08:00:00Z,,running,,\n", "--create-teams")
    assert err == "" and "teams created: newteam" in out and "projects created: newteam/newproj" in out
    job = Job.objects.get(external_id="c1")
    assert (job.team.slug, job.project.slug, job.gpu_model.name, job.gpu_model.memory_mib) == (
        "newteam", "newproj", "B300", 0)


def test_without_create_teams_an_unknown_team_is_a_rejected_row_that_says_how(tmp_path, cast):
    _out, err = jobs(tmp_path, b"c2,ann,newteam,,1,H200,,,,pending,,\n")
    assert err == "line 3: team: no team with slug 'newteam' (--create-teams creates it)\n"


@pytest.mark.parametrize("bad", [GARBAGE, b"s1,ann,alpha,,1,H200,,0001-01-01T00:00:00Z,,running,,\n"])
def test_strict_refuses_the_file_with_nothing_written(tmp_path, cast, bad):
    with pytest.raises(CommandError, match="--strict: 1 bad row\\(s\\), nothing imported: line 3: "):
        jobs(tmp_path, bad, "--strict", "--create-teams")
    assert not Job.objects.exists()
    with pytest.raises(CommandError, match="--strict: 1 bad row"):
        samples(tmp_path, bad, "--strict")
    assert not Sample.objects.exists() and not Node.objects.filter(hostname="imp-01").exists()
