from datetime import timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cluster.jobs.serializers import decimal_text
from cluster.jobs.services import JobInput, job_upsert
from cluster.models import Allocation, IdentityKind, Job, TeamIdentity
from teams.models import ApiToken
from teams.tokens import ApiTokenKind
from tests.conftest import T0

pytestmark = pytest.mark.django_db

DROP = object()
START = "2026-11-02T01:00:00+00:00"
START_SHOWN = "2026-11-02T01:00:00Z"  # times come back in UTC, written with Z
ROW_FIELDS = {
    "id", "source", "job_id", "name", "user", "team", "project", "account", "partition", "priority", "gpu_count",
    "gpu_model", "estimated_card_hours", "data_ready", "data_ready_at", "state", "submit_time", "start_time",
    "end_time", "node_list", "allocations",
}


def record(**changes):
    """A whole run, every field the API names, with changes; DROP leaves a field out."""
    body = {
        "source": "slurm", "job_id": "1001", "user": "ed", "team": "alpha", "project": "alpha-pre",
        "gpu_count": "2", "gpu_model": "H200", "submit_time": "2026-11-02T00:00:00+00:00", "start_time": START,
        "end_time": None, "state": "running", "node": "h200-a", "gpu_indices": "0,1", "priority": 10,
        "estimated_card_hours": "4", "data_ready": True, "name": "train", "account": "alpha", "partition": "train",
    }
    body.update(changes)
    return {name: value for name, value in body.items() if value is not DROP}


@pytest.fixture(autouse=True)
def frozen_clock():
    """Job times may lie at most a day ahead of the application's clock: the runs of 2 November are
    posted a month later, whatever the real date."""
    with time_machine.travel(T0 + timedelta(days=30), tick=False):
        yield


@pytest.fixture
def cast(team_a, team_b, small_cluster):
    return small_cluster


@pytest.fixture
def hook(api, cast, django_user_model):
    """An API client holding a service token, as the scheduler hooks do."""
    account = django_user_model.objects.create_user("svc-slurm")
    _token, raw = ApiToken.issue(user=account, name="slurm", kind=ApiTokenKind.SERVICE)
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return api


def run_of(team, external_id="9001", start=T0, **facts):
    job, _outcome = job_upsert(JobInput(source="slurm", external_id=external_id, start_time=start, team=team, **facts))
    return job


def hook_body(phase, **changes):
    """What agents/contrib/slurm/cardhour-hook.sh posts: no team, project, model or submit time."""
    body = {"source": "slurm", "job_id": "4242_3", "user": "ed", "account": "alpha", "partition": "gpu",
            "name": "train", "start_time": "2026-11-02T01:00:00Z", "node": "h200-a", "gpu_indices": "0,1",
            "gpu_count": "2"}
    body |= {"state": "running"} if phase == "start" else {"state": "completed", "end_time": "2026-11-02T04:00:00Z"}
    return body | changes


def test_the_slurm_hooks_record_a_run_and_end_it(hook):
    started = hook.post("/api/v1/jobs/", hook_body("start"))
    assert started.status_code == 201, started.json()
    row = started.json()
    assert (row["team"], row["project"], row["gpu_model"], row["gpu_count"]) == ("alpha", None, "H200", "2.000")
    assert [(a["gpu"], a["end"]) for a in row["allocations"]] == [("GPU-h200-a-0", None), ("GPU-h200-a-1", None)]
    assert hook.post("/api/v1/jobs/", hook_body("start")).status_code == 200  # a prolog run twice

    ended = hook.post("/api/v1/jobs/", hook_body("end"))
    assert ended.status_code == 200, ended.json()
    assert (ended.json()["state"], ended.json()["end_time"]) == ("completed", "2026-11-02T04:00:00Z")
    assert [a["end"] for a in ended.json()["allocations"]] == ["2026-11-02T04:00:00Z"] * 2
    assert Job.objects.count() == 1


def test_a_multi_node_run_from_the_hooks_is_unplaced(hook):
    response = hook.post("/api/v1/jobs/", hook_body("start", node=None, gpu_indices=None, gpu_count="16"))
    assert response.status_code == 201, response.json()
    assert [(a["gpu"], a["share_fraction"]) for a in response.json()["allocations"]] == [(None, "16")]


def test_a_run_without_a_team_takes_the_team_its_identities_map_to(hook, team_b):
    TeamIdentity.objects.create(kind=IdentityKind.SLURM_ACCOUNT, name="vision", team=team_b,
                                project=team_b.projects.get())
    TeamIdentity.objects.create(kind=IdentityKind.UNIX_USER, name="bea", team=team_b)
    by_account = hook.post("/api/v1/jobs/", hook_body("start", account="vision"))
    assert (by_account.json()["team"], by_account.json()["project"]) == ("beta", "beta-vision")
    by_user = hook.post("/api/v1/jobs/", hook_body("start", job_id="2", account="", user="bea"))
    assert (by_user.json()["team"], by_user.json()["project"]) == ("beta", None)
    unmapped = hook.post("/api/v1/jobs/", hook_body("start", job_id="3", account="physics", user="zed"))
    assert unmapped.status_code == 400
    assert unmapped.json()["detail"].startswith("team: is required")


def test_a_lead_cannot_reach_another_team_through_an_identity(api, cast, lead_a, team_b):
    TeamIdentity.objects.create(kind=IdentityKind.SLURM_ACCOUNT, name="vision", team=team_b)
    response = api.as_user(lead_a).post("/api/v1/jobs/", hook_body("start", account="vision"))
    assert response.status_code == 400
    assert "team" in response.json()
    assert not Job.objects.exists()


def test_it_creates_a_run_then_the_same_post_changes_nothing(hook):
    created = hook.post("/api/v1/jobs/", record())
    assert created.status_code == 201, created.json()
    row = created.json()
    assert set(row) == ROW_FIELDS
    assert (row["source"], row["job_id"], row["team"], row["project"]) == ("slurm", "1001", "alpha", "alpha-pre")
    assert (row["gpu_count"], row["gpu_model"], row["node_list"], row["state"]) == ("2.000", "H200", "h200-a", "running")
    assert row["start_time"] == START_SHOWN and row["end_time"] is None
    assert row["allocations"] == [
        {"gpu": f"GPU-h200-a-{index}", "gpu_model": "H200", "share": 840000, "share_fraction": "1",
         "start": START_SHOWN, "end": None, "origin": "scheduler"}
        for index in (0, 1)
    ]
    updated_at = Job.objects.get().updated_at

    again = hook.post("/api/v1/jobs/", record())
    assert again.status_code == 200
    assert again.json() == row
    assert Job.objects.count() == 1 and Allocation.objects.count() == 2
    assert Job.objects.get().updated_at == updated_at


def test_a_run_carries_its_data_ready_time_shown_in_utc(hook):
    """Issue 19: when the job's input data is ready; unlike the job's own times it may lie weeks ahead."""
    created = hook.post("/api/v1/jobs/", record(data_ready_at="2026-11-03T09:00:00+08:00"))
    assert created.status_code == 201, created.json()
    assert created.json()["data_ready_at"] == "2026-11-03T01:00:00Z"
    assert Job.objects.get().data_ready_at == T0.replace(day=3, hour=1)
    ahead = (T0 + timedelta(days=30 + 21)).isoformat()  # three weeks after the clock of this module
    moved = hook.patch(f"/api/v1/jobs/{created.json()['id']}/", {"data_ready_at": ahead})
    assert moved.status_code == 200, moved.json()
    assert Job.objects.get().data_ready_at == T0 + timedelta(days=51)


def test_a_post_leaving_out_the_data_ready_time_keeps_it_and_null_clears_it(hook):
    created = hook.post("/api/v1/jobs/", record(data_ready_at="2026-11-02T03:00:00Z"))
    assert created.status_code == 201, created.json()
    epilog = hook.post("/api/v1/jobs/", record(end_time="2026-11-02T05:00:00Z", state="completed"))
    assert epilog.status_code == 200, epilog.json()
    assert epilog.json()["data_ready_at"] == "2026-11-02T03:00:00Z"
    cleared = hook.patch(f"/api/v1/jobs/{created.json()['id']}/", {"data_ready_at": None}, format="json")
    assert cleared.status_code == 200, cleared.json()
    assert cleared.json()["data_ready_at"] is None and Job.objects.get().data_ready_at is None


def test_it_updates_the_end_by_post_and_the_allocations_follow(hook):
    hook.post("/api/v1/jobs/", record())
    end = "2026-11-02T05:00:00Z"
    response = hook.post("/api/v1/jobs/", record(end_time="2026-11-02T13:00:00+08:00", state="completed"))
    assert response.status_code == 200
    assert (response.json()["end_time"], response.json()["state"]) == (end, "completed")
    assert [a["end"] for a in response.json()["allocations"]] == [end, end]
    assert Job.objects.count() == 1


def test_an_epilog_may_post_only_what_it_learnt(hook):
    hook.post("/api/v1/jobs/", record())
    end = "2026-11-02T05:00:00Z"
    body = {"source": "slurm", "job_id": "1001", "start_time": START, "end_time": end, "state": "completed"}
    response = hook.post("/api/v1/jobs/", body)
    assert response.status_code == 200, response.json()
    row = response.json()
    assert (row["team"], row["project"], row["gpu_count"], row["priority"]) == ("alpha", "alpha-pre", "2.000", 10)
    assert [(a["gpu"], a["end"]) for a in row["allocations"]] == [("GPU-h200-a-0", end), ("GPU-h200-a-1", end)]


def test_it_updates_the_end_by_patch_keeping_the_placement(hook):
    job_id = hook.post("/api/v1/jobs/", record()).json()["id"]
    end = "2026-11-02T03:30:00Z"
    response = hook.patch(f"/api/v1/jobs/{job_id}/", {"end_time": end, "state": "failed"})
    assert response.status_code == 200, response.json()
    assert response.json()["state"] == "failed"
    assert [(a["gpu"], a["end"]) for a in response.json()["allocations"]] == [
        ("GPU-h200-a-0", end), ("GPU-h200-a-1", end)
    ]
    assert set(Allocation.objects.values_list("end", flat=True)) == {T0 + timedelta(hours=3, minutes=30)}


def test_a_patch_may_unplace_a_run(hook):
    job_id = hook.post("/api/v1/jobs/", record()).json()["id"]
    response = hook.patch(f"/api/v1/jobs/{job_id}/", {"gpu_indices": []})
    assert response.status_code == 200, response.json()
    assert [(a["gpu"], a["gpu_model"], a["share_fraction"]) for a in response.json()["allocations"]] == [
        (None, "H200", "2")
    ]


def test_it_keeps_each_run_of_a_requeued_job(hook):
    assert hook.post("/api/v1/jobs/", record(end_time="2026-11-02T02:00:00+00:00", state="requeued")).status_code == 201
    assert hook.post("/api/v1/jobs/", record(start_time="2026-11-02T03:00:00+00:00")).status_code == 201
    assert sorted(Job.objects.values_list("external_id", "state")) == [("1001", "requeued"), ("1001", "running")]
    assert Allocation.objects.count() == 4


def test_it_records_an_unplaced_fractional_job(hook):
    response = hook.post("/api/v1/jobs/", record(node=DROP, gpu_indices=DROP, gpu_count="0.5"))
    assert response.status_code == 201, response.json()
    assert response.json()["gpu_count"] == "0.500"
    assert [(a["gpu"], a["gpu_model"], a["share"], a["share_fraction"]) for a in response.json()["allocations"]] == [
        (None, "H200", 420000, "0.5")
    ]


@pytest.mark.parametrize("indices", ["0-1", [0, 1], " 0, 1 "])
def test_it_reads_gpu_indices_as_a_list_or_slurm_text(hook, indices):
    response = hook.post("/api/v1/jobs/", record(gpu_indices=indices))
    assert [a["gpu"] for a in response.json()["allocations"]] == ["GPU-h200-a-0", "GPU-h200-a-1"]


def test_a_placed_job_takes_its_count_and_model_from_its_gpus(hook):
    response = hook.post("/api/v1/jobs/", record(gpu_count=DROP, gpu_model=DROP, gpu_indices=[1]))
    assert response.status_code == 201, response.json()
    assert (response.json()["gpu_count"], response.json()["gpu_model"]) == ("1.000", "H200")


def test_source_defaults_to_api(hook):
    response = hook.post("/api/v1/jobs/", record(source=DROP))
    assert response.json()["source"] == "api"


@pytest.mark.parametrize(
    ("changes", "field", "rule"),
    [
        ({"team": "gamma"}, "team", "Unknown team “gamma”"),
        ({"team": DROP, "account": "unmapped", "user": "nobody"}, "team", "is required"),
        ({"project": "nope"}, "project", "Unknown project “nope” in team “alpha”"),
        ({"project": "beta-vision"}, "project", "belongs to team “beta”, not “alpha”"),
        ({"end_time": "2026-11-02T00:30:00+00:00"}, "end_time", "is before start_time"),
        ({"gpu_count": "-1", "node": DROP, "gpu_indices": DROP}, "gpu_count", "must not be negative"),
        ({"gpu_count": "0.0005", "node": DROP, "gpu_indices": DROP}, "gpu_count", "no more than 3 decimal"),
        ({"estimated_card_hours": "-2"}, "estimated_card_hours", "must not be negative"),
        ({"start_time": "2026-11-02T01:00:00"}, "start_time", "needs a UTC offset"),
        ({"end_time": "2026-11-02 05:00"}, "end_time", "needs a UTC offset"),
        ({"submit_time": "yesterday"}, "submit_time", "wrong format"),
        ({"gpu_model": "Z9"}, "gpu_model", "Unknown GPU model “Z9”"),
        ({"gpu_model": "L40S"}, "gpu_model", "the job's GPUs are H200"),
        ({"gpu_count": "3"}, "gpu_count", "holds 2 GPUs"),
        ({"node": "nowhere"}, "node", "Unknown node “nowhere”"),
        ({"node": DROP}, "node", "is required with gpu_indices"),
        ({"gpu_indices": "0,7"}, "gpu_indices", "Node h200-a has no GPU 7"),
        ({"gpu_indices": "0,x"}, "gpu_indices", "list of integers"),
        ({"gpu_indices": [0, -1]}, "gpu_indices", "list of integers"),
        ({"gpu_indices": "0,0"}, "gpu_indices", "named twice"),
        ({"gpu_indices": "40000"}, "gpu_indices", "at most 32767"),
        ({"gpu_indices": "0-999"}, "gpu_indices", "At most 256 GPU indices"),
        ({"source": "observed"}, "source", "Observed jobs are written by the system"),
        ({"source": "lsf"}, "source", "not a valid choice"),
        ({"state": "exploded"}, "state", "not a valid choice"),
        ({"job_id": DROP}, "job_id", "required"),
        ({"job_id": ""}, "job_id", "may not be blank"),
        ({"data_ready_at": "soon"}, "data_ready_at", "wrong format"),
        ({"data_ready_at": "2026-11-03T09:00:00"}, "data_ready_at", "needs a UTC offset"),
        ({"data_ready_at": "2150-01-01T00:00:00Z"}, "data_ready_at", "outside the supported window"),
        ({"data_ready_at": True}, "data_ready_at", "wrong format"),
    ],
)
def test_bad_input_is_a_400_naming_the_field_and_writes_nothing(hook, changes, field, rule):
    response = hook.post("/api/v1/jobs/", record(**changes))
    assert response.status_code == 400, response.json()
    body = response.json()
    assert field in body
    assert rule in " ".join(body[field])
    assert f"{field}: " in body["detail"] and rule in body["detail"]
    assert not Job.objects.exists() and not Allocation.objects.exists()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"start_time": "2026-11-02T02:00:00+00:00"}, "start_time"),
        ({"job_id": "1002"}, "job_id"),
        ({"source": "csv"}, "source"),
        ({"end_time": "2026-11-02T00:00:00+00:00"}, "end_time"),
        ({"end_time": "2026-11-02T05:00:00"}, "end_time"),
        ({"gpu_count": "-1"}, "gpu_count"),
        ({"team": "gamma"}, "team"),
    ],
)
def test_a_bad_patch_is_a_400_naming_the_field_and_changes_nothing(hook, changes, field):
    created = hook.post("/api/v1/jobs/", record()).json()
    response = hook.patch(f"/api/v1/jobs/{created['id']}/", changes)
    assert response.status_code == 400, response.json()
    assert field in response.json() and response.json()["detail"].startswith(f"{field}: ")
    assert hook.get(f"/api/v1/jobs/{created['id']}/").json() == created


def test_patching_a_key_field_to_its_own_value_is_fine(hook):
    created = hook.post("/api/v1/jobs/", record()).json()
    response = hook.patch(f"/api/v1/jobs/{created['id']}/", {"source": "slurm", "job_id": "1001", "start_time": START})
    assert response.status_code == 200


def test_a_service_token_writes_any_teams_jobs(hook):
    assert hook.post("/api/v1/jobs/", record()).status_code == 201
    beta = hook.post("/api/v1/jobs/", record(job_id="2002", team="beta", project="beta-vision"))
    assert beta.status_code == 201, beta.json()
    assert sorted(Job.objects.values_list("team__slug", flat=True)) == ["alpha", "beta"]
    assert hook.get("/api/v1/jobs/").json()["count"] == 2


def test_admins_write_any_teams_jobs(api, cast, admin_user):
    client = api.as_user(admin_user)
    assert client.post("/api/v1/jobs/", record(team="beta", project="beta-vision")).status_code == 201
    job = Job.objects.get()
    assert client.patch(f"/api/v1/jobs/{job.pk}/", {"state": "cancelled"}).status_code == 200


def test_a_lead_writes_only_their_own_teams_jobs(api, cast, lead_a, team_b):
    client = api.as_user(lead_a)
    assert client.post("/api/v1/jobs/", record()).status_code == 201
    refused = client.post("/api/v1/jobs/", record(job_id="2002", team="beta", project=DROP))
    assert refused.status_code == 400
    assert refused.json()["team"] == ["Unknown team “beta”."]
    assert not Job.objects.filter(external_id="2002").exists()

    beta_job = run_of(team_b, external_id="9001", start=T0)
    assert client.patch(f"/api/v1/jobs/{beta_job.pk}/", {"state": "failed"}).status_code == 404
    collision = client.post(
        "/api/v1/jobs/", record(job_id="9001", start_time=T0.isoformat(), node=DROP, gpu_indices=DROP)
    )
    assert collision.status_code == 400
    assert "job_id" in collision.json()
    beta_job.refresh_from_db()
    assert (beta_job.team, beta_job.state) == (team_b, "pending")


def test_another_teams_run_reads_as_a_missing_one(api, cast, lead_a, team_b):
    """No existence oracle (issue 17): posting another team's key without a team answers exactly as a
    key no run has; the message that a key is taken comes only once the post is otherwise complete, and
    never names the team."""
    run_of(team_b, external_id="9001", start=T0)
    client = api.as_user(lead_a)
    bare = {"team": DROP, "project": DROP, "account": "nobody", "user": "nobody", "node": DROP, "gpu_indices": DROP,
            "start_time": T0.isoformat()}
    theirs = client.post("/api/v1/jobs/", record(job_id="9001", **bare))
    missing = client.post("/api/v1/jobs/", record(job_id="9002", **bare))
    assert (theirs.status_code, theirs.json()) == (missing.status_code, missing.json())
    assert theirs.status_code == 400 and list(theirs.json()) == ["detail", "team"]
    assert "beta" not in theirs.content.decode().lower()
    assert not Job.objects.filter(external_id="9002").exists()
    assert Job.objects.get(external_id="9001").team == team_b


def test_a_lead_of_two_teams_moves_a_job_between_them(api, cast, lead_a, team_b):
    from teams.models import Membership

    Membership.objects.create(user=lead_a, team=team_b, role="lead")
    client = api.as_user(lead_a)
    job_id = client.post("/api/v1/jobs/", record()).json()["id"]
    stale_project = client.patch(f"/api/v1/jobs/{job_id}/", {"team": "beta"})
    assert stale_project.status_code == 400
    assert "project" in stale_project.json()
    moved = client.patch(f"/api/v1/jobs/{job_id}/", {"team": "beta", "project": "beta-vision"})
    assert moved.status_code == 200, moved.json()
    assert (moved.json()["team"], moved.json()["project"]) == ("beta", "beta-vision")


@pytest.mark.parametrize("who", ["engineer_a", "finance_user"])
def test_engineers_and_finance_cannot_write_jobs(api, cast, team_a, request, who):
    job = run_of(team_a)
    client = api.as_user(request.getfixturevalue(who))
    assert client.post("/api/v1/jobs/", record()).status_code == 403
    assert client.patch(f"/api/v1/jobs/{job.pk}/", {"state": "failed"}).status_code == 403
    assert client.get(f"/api/v1/jobs/{job.pk}/").status_code == 200
    assert Job.objects.count() == 1 and Job.objects.get().state == "pending"


def test_nobody_patches_an_observed_job(api, cast, admin_user, team_a):
    job, _outcome = job_upsert(JobInput(source="observed", external_id="pid-1", start_time=T0, team=team_a))
    response = api.as_user(admin_user).patch(f"/api/v1/jobs/{job.pk}/", {"state": "failed"})
    assert response.status_code == 403
    assert "Observed jobs" in response.json()["detail"]


def test_writes_take_json_only(hook):
    response = hook.post("/api/v1/jobs/", {"job_id": "1", "team": "alpha"}, format="multipart")
    assert response.status_code == 415
    assert not Job.objects.exists()


def test_put_is_not_offered_and_hooks_do_not_delete(hook):
    job_id = hook.post("/api/v1/jobs/", record()).json()["id"]
    assert hook.put(f"/api/v1/jobs/{job_id}/", record()).status_code == 405
    assert hook.delete(f"/api/v1/jobs/{job_id}/").status_code == 403  # admins and leads delete (issue 12)
    assert Job.objects.filter(pk=job_id).exists()


def test_sessions_read_and_leads_write(client, cast, lead_a, engineer_a):
    client.force_login(lead_a)
    assert client.post("/api/v1/jobs/", record(), content_type="application/json").status_code == 201
    client.force_login(engineer_a)
    assert client.get("/api/v1/jobs/").json()["count"] == 1


@pytest.mark.parametrize("who", ["lead_a", "engineer_a"])
def test_a_team_sees_only_its_own_jobs(api, cast, team_a, team_b, request, who):
    run_of(team_a)
    beta_job = run_of(team_b, external_id="9002")
    client = api.as_user(request.getfixturevalue(who))
    rows = client.get("/api/v1/jobs/").json()["results"]
    assert [row["team"] for row in rows] == ["alpha"]
    assert client.get("/api/v1/jobs/?team=beta").status_code == 400  # as unknown as a team that does not exist
    assert client.get(f"/api/v1/jobs/{beta_job.pk}/").status_code == 404


@pytest.mark.parametrize("who", ["admin_user", "finance_user"])
def test_admin_and_finance_see_every_teams_jobs(api, cast, team_a, team_b, request, who):
    run_of(team_a)
    run_of(team_b, external_id="9002")
    rows = api.as_user(request.getfixturevalue(who)).get("/api/v1/jobs/").json()["results"]
    assert sorted(row["team"] for row in rows) == ["alpha", "beta"]


@pytest.fixture
def three_jobs(cast, team_a, team_b):
    h200, l40s = cast["h200"], cast["l40s"]
    project = team_a.projects.get()
    run_of(team_a, "1", start=T0, submit_time=T0, user="ed", project=project, gpu_count=Decimal(1), gpu_model=h200,
           state="completed", end_time=T0 + timedelta(hours=2), priority=5)
    run_of(team_a, "2", start=T0 + timedelta(hours=3), submit_time=T0 + timedelta(hours=1), user="lena",
           gpu_count=Decimal(4), gpu_model=l40s, state="running", priority=1)
    job_upsert(JobInput(source="csv", external_id="3", start_time=None, team=team_b, submit_time=T0 + timedelta(hours=2),
                        gpu_count=Decimal(2), gpu_model=h200))


@pytest.mark.parametrize(
    ("query", "job_ids"),
    [
        ({}, ["3", "2", "1"]),
        ({"team": "alpha"}, ["2", "1"]),
        ({"project": "alpha-pre"}, ["1"]),
        ({"user": "lena"}, ["2"]),
        ({"state": "completed"}, ["1"]),
        ({"gpu_model": "H200"}, ["3", "1"]),
        ({"source": "csv"}, ["3"]),
        ({"started_after": "2026-11-02T01:00:00+00:00"}, ["2"]),
        ({"started_before": "2026-11-02T09:00:00+08:00"}, ["1"]),
        ({"started_after": "2026-11-02T00:00:00Z", "started_before": "2026-11-02T03:00:00Z"}, ["1"]),
        ({"ordering": "gpu_count"}, ["1", "3", "2"]),
        ({"ordering": "-priority"}, ["1", "2", "3"]),
        ({"ordering": "start_time"}, ["1", "2", "3"]),
        ({"ordering": "-end_time"}, ["1", "3", "2"]),
        ({"state": "", "team": ""}, ["3", "2", "1"]),
    ],
)
def test_the_list_filters_and_orders(api, admin_user, three_jobs, query, job_ids):
    response = api.as_user(admin_user).get("/api/v1/jobs/", query)
    assert response.status_code == 200, response.json()
    assert [row["job_id"] for row in response.json()["results"]] == job_ids


@pytest.mark.parametrize(
    ("query", "field", "rule"),
    [
        ({"started_after": "2026-11-02T00:00:00"}, "started_after", "needs a UTC offset"),
        ({"started_before": "soon"}, "started_before", "wrong format"),
        ({"started_after": "2026-11-02T05:00:00Z", "started_before": "2026-11-02T01:00:00Z"}, "started_before",
         "later than started_after"),
        ({"state": "melted"}, "state", "not a valid choice"),
        ({"source": "lsf"}, "source", "not a valid choice"),
        ({"team": "gamma"}, "team", "Unknown team"),
        ({"project": "nope"}, "project", "Unknown project"),
        ({"gpu_model": "Z9"}, "gpu_model", "Unknown GPU model"),
        ({"ordering": "name"}, "ordering", "not a valid choice"),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(api, admin_user, three_jobs, query, field, rule):
    response = api.as_user(admin_user).get("/api/v1/jobs/", query)
    assert response.status_code == 400
    assert field in response.json()
    assert response.json()["detail"].startswith(f"{field}: ") and rule in response.json()["detail"]


def test_the_list_is_paginated(api, admin_user, three_jobs):
    page = api.as_user(admin_user).get("/api/v1/jobs/", {"limit": 2}).json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["next"]


def test_list_query_count_is_pinned(api, lead_a, cast, team_a):
    """Token, groups, count, jobs (with team, project, model), allocations (with GPU and model): five
    queries however many rows and allocations."""
    client = api.as_user(lead_a)
    client.get("/api/v1/jobs/")  # the token's first use writes last_used_at
    gpus = list(cast["nodes"][0].gpus.all())

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get("/api/v1/jobs/").status_code == 200
        return len(captured)

    run_of(team_a, "0", gpus=gpus)
    assert queries() == 5
    for n in range(1, 15):
        run_of(team_a, str(n), gpu_count=Decimal("0.5"), gpu_model=cast["h200"], project=team_a.projects.get())
        run_of(team_a, f"p{n}", gpus=gpus, gpu_model=cast["h200"])
    assert queries() == 5


def test_the_openapi_schema_documents_the_jobs_api(api, engineer_a):
    schema = api.as_user(engineer_a).get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    jobs, job = schema["paths"]["/api/v1/jobs/"], schema["paths"]["/api/v1/jobs/{id}/"]
    assert {"200", "201", "400", "403"} <= set(jobs["post"]["responses"])
    assert {"200", "400", "403", "404"} <= set(job["patch"]["responses"])
    assert {"get", "post"} <= set(jobs) and {"get", "patch"} <= set(job) and "put" not in job
    assert {"team", "started_after", "started_before", "ordering", "gpu_model"} <= {
        parameter["name"] for parameter in jobs["get"]["parameters"]
    }
    request_fields = set(schema["components"]["schemas"]["JobWriteRequest"]["properties"])
    assert set(record()) | {"data_ready_at"} <= request_fields
    ready_at = schema["components"]["schemas"]["Job"]["properties"]["data_ready_at"]
    assert (ready_at["type"], ready_at["format"], ready_at.get("nullable")) == ("string", "date-time", True)
    assert "gpu_indices" not in schema["components"]["schemas"]["Job"]["properties"]


def test_the_schema_offers_every_source_but_observed_for_writing(api, engineer_a):
    schema = api.as_user(engineer_a).get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    components = schema["components"]["schemas"]

    def enum(prop: dict) -> list:
        ref = prop.get("$ref") or next(part["$ref"] for part in prop.get("allOf", []) if "$ref" in part)
        return components[ref.rsplit("/", 1)[1]]["enum"]

    written = enum(components["JobWriteRequest"]["properties"]["source"])
    assert "observed" not in written and {"api", "slurm"} <= set(written)
    listed = next(p for p in schema["paths"]["/api/v1/jobs/"]["get"]["parameters"] if p["name"] == "source")
    assert "observed" in listed["schema"]["enum"]  # observed jobs are listed, only not written


@pytest.mark.parametrize(
    ("fraction", "text"),
    [(Fraction(1), "1"), (Fraction(1, 2), "0.5"), (Fraction(9, 4), "2.25"), (Fraction(1, 7), "0.142857"),
     (Fraction(10), "10"), (Fraction(1, 1000), "0.001")],
)
def test_it_writes_shares_as_plain_decimals(fraction, text):
    assert decimal_text(fraction) == text
