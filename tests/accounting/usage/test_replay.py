"""Replaying history as the README's "Replaying history" section says, with no Celery worker: the example
files of docs/examples through ``import_samples``, ``import_jobs --create-teams`` and ``usage_report``.

The trace (docs/examples/samples.csv): 2026-10-05, 08:00–11:00 UTC, one record a minute (ts = the end of the
minute it covers), two nodes with two GPUs each, model "NVIDIA A100-SXM4-80GB" (unknown before the import):

    rp-01/0  util 80 %  08:00–11:00
    rp-01/1  util  2 %  08:00–11:00             (under the 5 % idle threshold)
    rp-02/0  util 80 %  08:00–09:30, 0 % 09:30–11:00
    rp-02/1  util 50 %  08:00–10:00, no samples after 10:00

The jobs (docs/examples/jobs.csv; teams nlp and vision and project nlp/llm do not exist yet):

    j1  nlp/llm  rp-01 GPUs 0-1   08:00–10:00   rp-01/0 busy 2 h; rp-01/1 idle 2 h
    j2  vision   rp-02 GPU 0      09:00–11:00   busy 09:00–09:30 = 0.5 h; idle 09:30–11:00 = 1.5 h
    j3  vision   rp-02 GPU 1      09:30–11:30   busy 09:30–10:00 = 0.5 h; unmeasured 10:00–11:30 = 1.5 h
    j4  nlp      unplaced, 1 GPU "a100_80" (a GPU model nobody knows: created)  08:00–09:00
                                                unplaced: 1 h allocated and unmeasured for nlp

By hand, over the business day 2026-10-05 (UTC):
    nlp:     busy 2, idle 2, unmeasured 1          allocated 5 card-hours
    vision:  busy 0.5 + 0.5 = 1, idle 1.5, unmeasured 1.5      allocated 4
    the A100 model (4 GPUs × 24 h = 96 capacity): busy 2 + 0.5 + 0.5 = 3, idle 2 + 1.5 = 3.5,
    unmeasured 1.5 (the unplaced hour is in no GPU), unallocated 96 − 8 = 88, down 0.
"""

import csv
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import time_machine
from django.core.management import call_command

from accounting.models import UsageDirty
from cluster.models import DirtyBucket, GpuModel, GpuModelAlias, Job
from teams.models import Project, Team

pytestmark = [pytest.mark.django_db, pytest.mark.clock]

EXAMPLES = Path(__file__).resolve().parents[3] / "docs" / "examples"
NOW = datetime(2026, 10, 7, 12, 0, tzinfo=UTC)  # well after the trace
DAY = ["--start", "2026-10-05T00:00:00Z", "--end", "2026-10-06T00:00:00Z"]


@pytest.fixture(autouse=True)
def frozen(settings):
    settings.CARDHOUR_BUSINESS_TIME_ZONE = "UTC"
    settings.CARDHOUR_IDLE_THRESHOLD_PCT = 5
    with time_machine.travel(NOW, tick=False):
        yield


def run(*args):
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def report(by):
    out, err = run("usage_report", *DAY, "--by", by, "--format", "json")
    return json.loads(out), err


def figures(row):
    return {k.removeprefix("card_hours_"): row[k] for k in row if k.startswith("card_hours_") and row[k] is not None}


def test_the_readme_replay_gives_the_figures_worked_out_by_hand(db):
    out, err = run("import_samples", str(EXAMPLES / "samples.csv"))
    assert err == ""
    assert "rows read 660, imported 660, already present 0, rejected 0; nodes created 2, GPUs created 4" in out
    assert "nodes created: rp-01, rp-02" in out
    assert "GPUs created: rp-01/0 (A100-SXM4-80GB), rp-01/1 (A100-SXM4-80GB), rp-02/0" in out
    assert "GPU models created" in out and "NVIDIA A100-SXM4-80GB" in out
    assert "rolled up 660 minute and 11 hour bucket(s)" in out  # 3 GPUs × 3 h and 1 GPU × 2 h
    assert not DirtyBucket.objects.exists() and not UsageDirty.objects.exists()

    out, err = run("import_jobs", str(EXAMPLES / "jobs.csv"), "--create-teams")
    assert err == ""
    assert "rows read 4, imported 4, updated 0, unchanged 0, skipped 0, rejected 0" in out
    assert "teams created: nlp, vision" in out and "projects created: nlp/llm" in out
    assert "GPU models created" in out and "a100_80" in out
    assert set(Team.objects.values_list("slug", flat=True)) == {"nlp", "vision"}
    assert Project.objects.get().team.slug == "nlp"
    assert Job.objects.get(external_id="j4").gpu_model.name == "a100_80"

    body, err = report("team")
    assert body["pending_buckets"] == 0 and body["pending_from"] is None and "pending" not in err
    assert body["data_complete_to"] == "2026-10-05T11:00:00+00:00"  # the imported nodes' last record
    assert {row["team"]: figures(row) for row in body["rows"]} == {
        "nlp": {"allocated": "5.0000", "busy": "2.0000", "idle": "2.0000", "unmeasured": "1.0000"},
        "vision": {"allocated": "4.0000", "busy": "1.0000", "idle": "1.5000", "unmeasured": "1.5000"},
    }
    body, _err = report("gpu_model")
    [row] = body["rows"]
    assert (row["gpu_model"], row["capacity_card_hours"]) == ("A100-SXM4-80GB", "96.0000")
    assert figures(row) == {"allocated": "8.0000", "busy": "3.0000", "idle": "3.5000", "unmeasured": "1.5000",
                            "unallocated": "88.0000", "down": "0.0000"}


def test_csv_output_and_importing_again_change_nothing(db):
    run("import_samples", str(EXAMPLES / "samples.csv"))
    run("import_jobs", str(EXAMPLES / "jobs.csv"), "--create-teams")
    before, _err = run("usage_report", *DAY)
    out, _err = run("import_samples", str(EXAMPLES / "samples.csv"))
    assert "imported 0, already present 660" in out and "nodes created 0, GPUs created 0" in out
    out, _err = run("import_jobs", str(EXAMPLES / "jobs.csv"), "--create-teams")
    assert "unchanged 4" in out and "teams created" not in out and "GPU models created" not in out
    after, _err = run("usage_report", *DAY)
    assert after == before
    assert [(r["team"], r["card_hours_allocated"]) for r in csv.DictReader(io.StringIO(after))] == [
        ("nlp", "5.0000"), ("vision", "4.0000")]


def test_defer_leaves_the_work_to_the_worker_and_the_report_says_so(db):
    out, _err = run("import_samples", str(EXAMPLES / "samples.csv"), "--defer")
    assert "--defer: rollups and daily aggregates left to the Celery worker (660 minute bucket(s)" in out
    out, err = run("import_jobs", str(EXAMPLES / "jobs.csv"), "--create-teams", "--defer")
    body, err = report("gpu_model")
    assert body["pending_buckets"] > 0 and body["pending_from"] == "2026-10-05T08:00:00+00:00"
    assert f"Warning: {body['pending_buckets']} buckets pending: figures after 2026-10-05T08:00:00+00:00 may change" in err
    # What the worker would do, done here: then the figures are the ones worked out by hand.
    from accounting.usage.replay import replay_finish

    replay_finish(now=NOW)
    body, err = report("team")
    assert body["pending_buckets"] == 0 and "pending" not in err
    assert [(row["team"], row["card_hours_allocated"]) for row in body["rows"]] == [("nlp", "5.0000"), ("vision", "4.0000")]


def test_an_alias_maps_a_slurm_type_to_the_model_and_sacct_rows_go_to_the_default_team(db):
    run("import_samples", str(EXAMPLES / "samples.csv"))
    a100 = GpuModel.objects.get(name="NVIDIA A100-SXM4-80GB")
    GpuModelAlias.objects.create(alias="A100_80", model=a100)  # as an admin does (stored lower case)
    out, _err = run("import_jobs", str(EXAMPLES / "jobs.csv"), "--create-teams")
    assert "GPU models created" not in out and Job.objects.get(external_id="j4").gpu_model == a100
    out, err = run("import_sacct", str(EXAMPLES / "sacct.txt"), "--default-team", "nlp")
    assert err == ""
    assert "rows read 4, imported 3, updated 0, unchanged 0, skipped 1, rejected 0" in out
    assert "rows sent to the default team nlp: 3" in out and "GPU models created" not in out
    runs = Job.objects.filter(source="slurm").order_by("external_id")
    assert [(j.external_id, j.team.slug, j.gpu_model and j.gpu_model.short_name) for j in runs] == [
        ("2001", "nlp", "A100-SXM4-80GB"), ("2002", "nlp", "A100-SXM4-80GB"), ("2003", "nlp", None)]
    body, _err = report("team")
    # nlp gains 2001 (1 GPU × 1 h) and 2002 (2 GPUs × 0.5 h), unplaced: 2 more unmeasured card-hours.
    assert {row["team"]: (row["card_hours_allocated"], row["card_hours_unmeasured"]) for row in body["rows"]} == {
        "nlp": ("7.0000", "3.0000"), "vision": ("4.0000", "1.5000")}


def test_a_models_own_name_wins_over_an_alias(db):
    """An alias added after an unknown name created a model of that name does not move it: names first."""
    from cluster.inventory.sync import gpu_model_resolve

    a100 = GpuModel.objects.create(name="NVIDIA A100-SXM4-80GB", short_name="A100", memory_mib=81920)
    made, created = gpu_model_resolve("a100_80")
    assert created and (made.name, made.memory_mib) == ("a100_80", 0)
    GpuModelAlias.objects.create(alias="a100_80", model=a100)
    GpuModelAlias.objects.create(alias="rtx30", model=a100)
    assert gpu_model_resolve("A100_80") == (made, False)
    assert gpu_model_resolve("RTX30") == (a100, False)
    assert gpu_model_resolve("nvidia_a100-sxm4-80gb") == (a100, False)
