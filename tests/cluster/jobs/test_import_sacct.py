"""``import_sacct``: Slurm's accounting rows as runs (cluster.jobs.imports.sacct), and the prolog/epilog hooks that
report the same runs through the API (agents/contrib/slurm)."""

import json
import os
import shutil
import subprocess
from datetime import UTC, datetime
from decimal import Decimal
from io import StringIO
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import time_machine
from django.core.management import CommandError, call_command

from cluster.jobs.imports.sacct import expand_hostlist, gpus_from_tres
from cluster.jobs.services import JobInput, job_upsert
from cluster.models import Allocation, Gpu, IdentityKind, Job, TeamIdentity
from core.units import WHOLE_GPU_SHARE
from teams.models import Team

FIXTURE = Path(__file__).parent / "fixtures" / "sacct_allocations.txt"
HOOKS = Path(__file__).resolve().parents[3] / "agents" / "contrib" / "slurm"
HEADER = FIXTURE.read_text().splitlines()[0] + "\n"


def at(hour, minute=0, second=0):
    return datetime(2026, 11, 2, hour, minute, second, tzinfo=UTC)


IMPORTED_AT = at(12)  # the clock of every import below: the same day, after the fixture's runs


@pytest.fixture(autouse=True)
def frozen_clock():
    """Job times are held to a day ahead of the application's clock: every test here, not only the
    commands, runs at the import's moment, whatever the real date."""
    with time_machine.travel(IMPORTED_AT, tick=False):
        yield


def run(tmp_path, *args, text=None):
    path = FIXTURE
    if text is not None:
        path = tmp_path / "sacct.txt"
        path.write_text(text)
    out, err = StringIO(), StringIO()
    with time_machine.travel(IMPORTED_AT, tick=False):  # an import accounts what it touched up to now
        call_command("import_sacct", str(path), *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def cast(team_a, team_b, small_cluster):
    project = team_a.projects.get(slug="alpha-pre")
    TeamIdentity.objects.create(kind=IdentityKind.SLURM_ACCOUNT, name="ml-research", team=team_a, project=project)
    return {"a": team_a, "b": team_b, "project": project, **small_cluster}


def jobs():
    return {(j.external_id, j.start_time): j for j in Job.objects.select_related("team", "project", "gpu_model")}


def test_it_imports_allocation_rows_and_skips_steps(tmp_path, cast):
    out, err = run(tmp_path)
    assert "rows read 20, imported 12, updated 0, unchanged 0, skipped 6, rejected 2" in out
    assert "skipped: job steps 5, pending array ranges 1" in out
    assert err == "line 17: Account: 'physics' maps to no team\nline 18: Account: 'physics' maps to no team\n"
    assert not Job.objects.filter(external_id__contains=".").exists()
    assert set(Job.objects.values_list("source", flat=True)) == {"slurm"}


def test_it_keeps_array_tasks_apart(tmp_path, cast):
    run(tmp_path)
    tasks = Job.objects.filter(external_id__startswith="1002").order_by("external_id")
    assert [(j.external_id, j.state, j.gpu_model, j.partition, j.name) for j in tasks] == [
        ("1002_1", "completed", cast["l40s"], "infer", "sweep"), ("1002_2", "failed", cast["l40s"], "infer", "sweep"),
    ]


def test_it_keeps_each_run_of_a_requeued_job(tmp_path, cast):
    run(tmp_path)
    runs = Job.objects.filter(external_id="1005").order_by("start_time")
    assert [(j.start_time, j.end_time, j.state, j.team, j.project) for j in runs] == [
        (at(6, 10), at(7), "requeued", cast["a"], cast["project"]), (at(7, 20), None, "running", cast["a"], cast["project"]),
    ]
    running = runs[1].allocations.get()
    assert (running.unplaced, running.share, running.gpu_model, running.end) == (True, 4 * WHOLE_GPU_SHARE, cast["h200"], None)
    assert runs[1].node_list == "h200-a,h200-b"


def test_it_counts_typed_and_untyped_gpus_once(tmp_path, cast):
    run(tmp_path)
    job = Job.objects.get(external_id="1001")
    assert (job.gpu_count, job.gpu_model, job.user, job.account, job.submit_time) == (
        Decimal(2), cast["h200"], "ann", "alpha", at(7, 55)
    )
    assert list(job.allocations.values_list("gpu", "share", "start", "end")) == [(None, 2 * WHOLE_GPU_SHARE, at(8), at(10))]
    # Typed only, and untyped only (the model then comes from the node).
    assert Job.objects.get(external_id="1010").gpu_model == cast["h200"]
    assert Job.objects.get(external_id="1006").gpu_model == cast["h200"]


def test_it_maps_slurm_states(tmp_path, cast):
    run(tmp_path)
    states = dict(Job.objects.values_list("external_id", "state"))
    assert {k: states[k] for k in ("1001", "1002_2", "1006", "1007", "1008", "1009", "1010", "1014")} == {
        "1001": "completed", "1002_2": "failed", "1006": "cancelled", "1007": "pending", "1008": "failed",
        "1009": "failed", "1010": "preempted", "1014": "cancelled",
    }


def test_it_reads_unknown_and_none_times(tmp_path, cast):
    run(tmp_path)
    pending, cancelled = Job.objects.get(external_id="1007"), Job.objects.get(external_id="1014")
    # Never started: no start, no allocation, but the GPUs it asked for (ReqTRES).
    assert (pending.start_time, pending.end_time, pending.gpu_count, pending.node_list) == (None, None, Decimal(2), "")
    assert (cancelled.start_time, cancelled.end_time, cancelled.gpu_count) == (None, at(11, 30), Decimal(2))
    assert not Allocation.objects.filter(job__in=[pending, cancelled]).exists()
    cpu_only = Job.objects.get(external_id="1013")
    assert (cpu_only.gpu_count, cpu_only.allocations.count()) == (0, 0)


def test_it_reads_naive_times_in_the_business_zone_or_tz(tmp_path, cast, settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "Asia/Shanghai"
    run(tmp_path)
    assert Job.objects.get(external_id="1001").start_time == at(0)  # 08:00 in Shanghai
    Job.objects.all().delete()
    run(tmp_path, "--tz", "UTC")
    assert Job.objects.get(external_id="1001").start_time == at(8)
    with pytest.raises(CommandError, match="--tz: 'Mars/Olympus' is not a time zone"):
        run(tmp_path, "--tz", "Mars/Olympus")


def test_it_reads_times_with_an_offset_as_given(tmp_path, cast):
    row = "77|77|ann|alpha|gpu|2026-11-02T08:00:00+01:00|2026-11-02T08:00:00+01:00|Unknown|RUNNING|gres/gpu=1|h200-a|60||\n"
    run(tmp_path, "--tz", "Asia/Shanghai", text=HEADER + row)
    assert Job.objects.get(external_id="77").start_time == at(7)


def test_it_ends_a_finished_run_without_end_at_start_plus_elapsed(tmp_path, cast):
    row = "78|78|ann|alpha|gpu|2026-11-02T08:00:00|2026-11-02T08:00:00|Unknown|COMPLETED|gres/gpu=1|h200-a|5400||\n"
    run(tmp_path, text=HEADER + row)
    assert Job.objects.get(external_id="78").end_time == at(9, 30)


def test_it_lists_unmapped_accounts_once(tmp_path, cast):
    out, _err = run(tmp_path)
    assert "unmapped accounts (rows rejected; map them with a Slurm account identity, or --create-teams): physics (2)" in out
    assert not Team.objects.filter(slug="physics").exists()


def test_it_creates_teams_for_unmapped_accounts(tmp_path, cast):
    out, err = run(tmp_path, "--create-teams")
    assert err == ""
    assert "imported 14" in out and "teams created: physics" in out
    team = Team.objects.get(slug="physics")
    assert (team.name, team.cost_centre) == ("physics", "physics")
    assert TeamIdentity.objects.get(kind=IdentityKind.SLURM_ACCOUNT, name="physics").team == team
    assert set(Job.objects.filter(account="physics").values_list("team", flat=True)) == {team.pk}
    out, _err = run(tmp_path, "--create-teams")
    assert "imported 0, updated 0, unchanged 14" in out and "teams created" not in out


def test_it_changes_nothing_when_imported_twice(tmp_path, cast):
    run(tmp_path)
    before = list(Job.objects.order_by("id").values()), list(Allocation.objects.order_by("id").values())
    out, _err = run(tmp_path)
    assert "rows read 20, imported 0, updated 0, unchanged 12, skipped 6, rejected 2" in out
    assert (list(Job.objects.order_by("id").values()), list(Allocation.objects.order_by("id").values())) == before


BAD = HEADER + (
    "90|90|ann|alpha|gpu|2026-11-02T08:00:00|2026-11-02T08:00:00|Unknown|DREAMING|gres/gpu=1|h200-a|60||\n"
    "91|91|ann|alpha|gpu|2026-11-02T08:00:00|at eight|Unknown|RUNNING|gres/gpu=1|h200-a|60||\n"
    "92|92|ann|alpha|gpu|2026-11-02T08:00:00|2026-11-02T08:00:00|Unknown|RUNNING|gres/gpu:b300=1|h200-a|60||\n"
    "93|93|ann|alpha|gpu|2026-11-02T08:00:00|2026-11-02T08:00:00|Unknown|RUNNING|gres/gpu=1|h200-a\n"
    "94|94|ann|alpha|gpu|2026-11-02T08:00:00|2026-11-02T08:00:00|Unknown|RUNNING|gres/gpu=two|h200-a|60||\n"
    "95|95|ann|alpha|gpu|2026-11-02T08:00:00|2026-11-02T08:00:00|Unknown|RUNNING|gres/gpu=1|h200-a|60||\n"
)


def test_it_reports_bad_rows_by_line(tmp_path, cast):
    out, err = run(tmp_path, text=BAD)
    assert err.splitlines() == [
        "line 2: State: 'DREAMING' is not a Slurm job state this import knows",
        "line 3: Start: 'at eight' is not a time (sacct prints 2026-11-02T08:00:00)",
        "line 5: 11 fields, the header has 14",
        "line 6: AllocTRES: 'gres/gpu=two' is not a whole GPU count",
    ]
    # Line 4's unknown GRES type b300 no longer rejects the row: the model is created and reported (issue 12).
    assert "rows read 6, imported 2, updated 0, unchanged 0, skipped 0, rejected 4" in out
    assert "GPU models created" in out and "b300" in out


def test_it_rejects_the_whole_file_with_strict(tmp_path, cast):
    with pytest.raises(CommandError, match="--strict: 2 bad row\\(s\\), nothing imported: line 17: Account"):
        run(tmp_path, "--strict")
    assert not Job.objects.exists()
    with pytest.raises(CommandError, match="--strict: 4 bad row"):
        run(tmp_path, "--strict", "--create-teams", text=BAD)
    assert not Job.objects.exists()


def test_it_names_a_missing_column(tmp_path, cast):
    with pytest.raises(CommandError, match="the sacct header lacks AllocTRES"):
        run(tmp_path, text="JobID|User|Account|Submit|Start|End|State\n1|a|b|||||\n")


def test_it_keeps_the_gpus_the_prolog_placed(tmp_path, cast):
    gpus = list(Gpu.objects.filter(node__hostname="h200-a").order_by("index"))
    job_upsert(JobInput(source="slurm", external_id="1001", start_time=at(8), team=cast["a"], gpu_count=Decimal(2),
                        state="running", node_list="h200-a", gpus=gpus))
    out, _err = run(tmp_path)
    assert "imported 11, updated 1" in out
    job = Job.objects.get(external_id="1001")
    assert (job.state, job.end_time) == ("completed", at(10))
    assert list(job.allocations.order_by("gpu__index").values_list("gpu__uuid", "end")) == [
        ("GPU-h200-a-0", at(10)), ("GPU-h200-a-1", at(10)),
    ]


def test_it_writes_the_same_rows_as_job_upsert_one_by_one(tmp_path, cast):
    from cluster.jobs.imports.sacct import read_sacct
    from cluster.jobs.imports.shared import JobImportReport, Lookups

    run(tmp_path)
    imported = list(Job.objects.order_by("external_id", "start_time").values_list(
        "external_id", "start_time", "team", "project", "gpu_count", "gpu_model", "state", "submit_time", "end_time",
        "node_list", "name", "user", "account", "partition")), sorted(
        Allocation.objects.values_list("job__external_id", "job__start_time", "gpu_model", "share", "start", "end"),
        key=str)
    Job.objects.all().delete()
    for _line, data in read_sacct(FIXTURE, zone=ZoneInfo("UTC"), lookups=Lookups(), report=JobImportReport()):
        job_upsert(data)
    assert imported == (list(Job.objects.order_by("external_id", "start_time").values_list(*(
        "external_id", "start_time", "team", "project", "gpu_count", "gpu_model", "state", "submit_time", "end_time",
        "node_list", "name", "user", "account", "partition"))), sorted(
        Allocation.objects.values_list("job__external_id", "job__start_time", "gpu_model", "share", "start", "end"),
        key=str))


def test_it_reads_slurm_host_lists_and_tres():
    assert expand_hostlist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist("") == []
    assert gpus_from_tres("cpu=8,gres/gpu:a100=2,gres/gpu:h100=2,gres/gpu=4,gres/gpumem=80G") == (Decimal(4), None)
    assert gpus_from_tres("gres/gpu:h200=3") == (Decimal(3), "h200")
    assert gpus_from_tres("cpu=4,mem=8G") == (Decimal(0), None)


# --- the prolog and epilog hooks -----------------------------------------------------------------

@pytest.fixture
def hook_env(tmp_path):
    """A fake curl on PATH that records its arguments and the JSON body, and Slurm's prolog variables."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    curl = bin_dir / "curl"
    curl.write_text(
        "#!/bin/bash\n"
        'printf "%s\\n" "$@" > "$FAKE_CURL_ARGS"\n'
        'while [ $# -gt 0 ]; do [ "$1" = "--data-binary" ] && cp "${2#@}" "$FAKE_CURL_BODY"; shift; done\n'
        '[ "${FAKE_CURL_EXIT:-0}" = 0 ] && printf 201\n'
        'exit "${FAKE_CURL_EXIT:-0}"\n'
    )
    curl.chmod(0o755)
    # The hooks read "now" with date(1): at FAKE_NOW_EPOCH when a test sets it, so that what they post
    # agrees with the application's frozen clock (a time given with -d is formatted as it is).
    date = bin_dir / "date"
    date.write_text(
        "#!/bin/bash\n"
        'for arg in "$@"; do case "$arg" in -d|-d*|--date*) exec /bin/date "$@";; esac; done\n'
        '[ -n "${FAKE_NOW_EPOCH:-}" ] && exec /bin/date -d "@$FAKE_NOW_EPOCH" "$@"\n'
        'exec /bin/date "$@"\n'
    )
    date.chmod(0o755)
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_CURL_ARGS": str(tmp_path / "args"), "FAKE_CURL_BODY": str(tmp_path / "body"),
        "CARDHOUR_URL": "http://cardhour.example:8000", "CARDHOUR_TOKEN": "secret-token",
        "CARDHOUR_HOOK_CONFIG": str(tmp_path / "none.env"), "CARDHOUR_STATE_DIR": str(tmp_path / "state"),
        "SLURM_JOB_ID": "4242", "SLURM_JOB_USER": "ann", "SLURM_JOB_ACCOUNT": "ml-research", "SLURM_JOB_PARTITION": "gpu",
        "SLURMD_NODENAME": "h200-a", "SLURM_JOB_GPUS": "0,1", "SLURM_JOB_NODELIST": "h200-a",
        "SLURM_JOB_NAME": 'train "7b"', "SLURM_JOB_START_TIME": "1793606400",
    }


def hook(name, env):
    if not shutil.which("bash"):
        pytest.skip("no bash")
    result = subprocess.run(["bash", str(HOOKS / name)], env=env, capture_output=True, text=True, timeout=30)
    body = Path(env["FAKE_CURL_BODY"])
    return result, (json.loads(body.read_text()) if body.exists() else None)


def test_it_reports_a_start_from_the_prolog(hook_env):
    result, body = hook("prolog.sh", hook_env)
    assert result.returncode == 0, result.stderr
    assert body == {
        "source": "slurm", "job_id": "4242", "user": "ann", "account": "ml-research", "partition": "gpu",
        "name": 'train "7b"', "state": "running", "start_time": "2026-11-02T08:00:00Z", "node": "h200-a",
        "gpu_indices": "0,1", "gpu_count": "2",
    }
    args = Path(hook_env["FAKE_CURL_ARGS"]).read_text().splitlines()
    assert "http://cardhour.example:8000/api/v1/jobs/" in args
    assert "--max-time" in args and "secret-token" not in " ".join(args)  # the token goes through a header file


def test_it_reports_the_end_from_the_epilog_with_what_the_prolog_sent(hook_env):
    _result, started = hook("prolog.sh", hook_env)
    env = {**hook_env, "SLURM_JOB_START_TIME": "", "SLURM_JOB_GPUS": "", "SLURM_JOB_DERIVED_EC": "0"}
    result, body = hook("epilog.sh", env)
    assert result.returncode == 0, result.stderr
    assert body.pop("end_time").endswith("Z")
    assert body == {**started, "state": "completed"}
    assert not list(Path(hook_env["CARDHOUR_STATE_DIR"]).iterdir())  # the prolog's record is gone


def test_it_reports_a_failed_end_and_nothing_without_a_start(hook_env):
    hook("prolog.sh", hook_env)
    _result, body = hook("epilog.sh", {**hook_env, "SLURM_JOB_DERIVED_EC": "1:0"})
    assert body["state"] == "failed"
    Path(hook_env["FAKE_CURL_BODY"]).unlink()
    result, body = hook("epilog.sh", {**hook_env, "SLURM_JOB_ID": "4243", "SLURM_JOB_START_TIME": ""})
    assert (result.returncode, body) == (0, None)
    assert "start time unknown" in result.stderr


def test_it_names_an_array_task_as_sacct_does_and_never_fails_the_job(hook_env):
    env = {**hook_env, "SLURM_ARRAY_JOB_ID": "4200", "SLURM_ARRAY_TASK_ID": "7", "FAKE_CURL_EXIT": "28"}
    result, body = hook("prolog.sh", env)
    assert result.returncode == 0
    assert body["job_id"] == "4200_7"
    assert "cardhour" in result.stderr.lower()


def test_it_reports_a_multi_node_job_once_unplaced(hook_env):
    env = {**hook_env, "SLURM_JOB_NODELIST": "gpu[09-10]", "SLURMD_NODENAME": "gpu10"}
    _result, body = hook("prolog.sh", env)
    assert body is None  # not the first node: the first one reports
    _result, body = hook("prolog.sh", {**env, "SLURMD_NODENAME": "gpu09"})
    assert "node" not in body and "gpu_indices" not in body
    assert body["gpu_count"] == "4"


def test_it_skips_without_configuration(hook_env):
    env = {k: v for k, v in hook_env.items() if k != "CARDHOUR_TOKEN"}
    result, body = hook("prolog.sh", env)
    assert (result.returncode, body) == (0, None)


@pytest.mark.skipif(not os.access("/bin/sh", os.X_OK), reason="no shell")
def test_it_ships_hooks_that_parse():
    for name in ("prolog.sh", "epilog.sh", "cardhour-hook.sh"):
        assert subprocess.run(["bash", "-n", str(HOOKS / name)], capture_output=True).returncode == 0, name


def test_it_falls_back_to_the_users_team_as_the_api_does(tmp_path, cast):
    TeamIdentity.objects.create(kind=IdentityKind.UNIX_USER, name="zed", team=cast["b"])
    out, err = run(tmp_path)
    assert err == "" and "imported 14" in out and "unmapped" not in out
    assert set(Job.objects.filter(account="physics").values_list("team", flat=True)) == {cast["b"].pk}


def test_it_merges_what_the_hooks_posted_with_the_sacct_row(tmp_path, cast, hook_env, api, django_user_model):
    from teams.models import ApiToken
    from teams.tokens import ApiTokenKind

    _token, raw = ApiToken.issue(user=django_user_model.objects.create_user("svc"), name="slurm", kind=ApiTokenKind.SERVICE)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    env = {**hook_env, "SLURM_JOB_ID": "1001", "SLURM_JOB_ACCOUNT": "alpha", "SLURM_JOB_NAME": "train-7b",
           "FAKE_NOW_EPOCH": str(int(IMPORTED_AT.timestamp()))}  # the epilog's end: the app's "now"
    for script, status in (("prolog.sh", 201), ("epilog.sh", 200)):
        _result, body = hook(script, env)
        response = api.post("/api/v1/jobs/", body, format="json")
        assert response.status_code == status, response.json()
    out, _err = run(tmp_path)
    assert "imported 11, updated 1" in out
    job = Job.objects.get(external_id="1001")
    assert (job.team, job.state, job.start_time, job.end_time, job.gpu_model) == (cast["a"], "completed", at(8), at(10), cast["h200"])
    assert list(job.allocations.order_by("gpu__index").values_list("gpu__uuid", "end")) == [
        ("GPU-h200-a-0", at(10)), ("GPU-h200-a-1", at(10)),
    ]
