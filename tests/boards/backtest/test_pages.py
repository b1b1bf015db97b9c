"""The backtest page and its CSV (boards/backtest/views.py): who may see what, the refusals naming the field and
the rule, the preset, the formula guard of the CSV; and the command (boards/management/commands/backtest.py)."""

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.core.management import CommandError, call_command
from django.urls import reverse

from accounting.models import DailyUsage
from tests.conftest import T0

pytestmark = pytest.mark.clock
NOW = T0 + timedelta(hours=10)  # Monday 2 November 2026: October is the last full month
RULE = {"r1-metric": "utilization", "r1-up": "80", "r1-down": "20", "r1-group": "2", "r1-min": "0", "r1-max": "8",
        "r1-cooldown": "30"}
TEAM_DAY = {"team": "alpha", "gpu_model": "H200", "start": "2026-10-05", "end": "2026-10-05"}


@pytest.fixture(autouse=True)
def frozen():
    with time_machine.travel(NOW, tick=False):
        yield


def get(client, user, params=None, name="boards:backtest"):
    client.force_login(user)
    return client.get(reverse(name), params or {})


def test_an_anonymous_visitor_is_sent_to_sign_in(client, history):
    response = client.get(reverse("boards:backtest"), TEAM_DAY | RULE)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert client.get(reverse("boards:backtest-csv")).status_code == 302


def test_an_engineer_may_not_backtest(client, history, engineer_a):
    assert get(client, engineer_a, TEAM_DAY | RULE).status_code == 403
    assert get(client, engineer_a, TEAM_DAY | RULE, name="boards:backtest-csv").status_code == 403


def test_a_lead_backtests_their_team(client, history, lead_a):
    response = get(client, lead_a, TEAM_DAY | RULE)
    assert response.status_code == 200
    body = response.content.decode()
    assert 'data-testid="backtest-table"' in body and 'id="fig-backtest-held"' in body
    report = response.context["report"]
    assert report.actual.card_hours == 5 and len(report.rules) == 1


@pytest.mark.parametrize("params", [{"team": "beta"}, {"team": "no-such-team"}, {"team": "", "pool": "train"},
                                    {"team": "", "pool": "no-such-pool"}])
def test_another_teams_scope_or_a_pool_is_missing_for_a_lead(client, history, lead_a, team_b, params):
    response = get(client, lead_a, TEAM_DAY | RULE | params)
    assert response.status_code == 404
    assert "report" not in response.context
    errors = response.context["errors"]
    assert len(errors) == 1 and ("team" in errors[0][1] or "pool" in errors[0][1])


def test_the_same_answer_for_another_team_and_no_team(client, history, lead_a, team_b):
    other = get(client, lead_a, TEAM_DAY | RULE | {"team": "beta"})
    missing = get(client, lead_a, TEAM_DAY | RULE | {"team": "nobody"})
    assert other.context["errors"] == missing.context["errors"]
    assert other.status_code == missing.status_code == 404
    assert errors_html(other) == errors_html(missing) and b"beta" not in errors_html(other)


def errors_html(response) -> bytes:
    body = response.content
    start = body.index(b'data-testid="backtest-errors"')
    return body[start:body.index(b"</ul>", start)]


@pytest.mark.parametrize("user", ["admin_user", "finance_user"])
def test_admins_and_finance_backtest_a_pool_and_any_team(client, history, request, user, team_b):
    user = request.getfixturevalue(user)
    assert get(client, user, TEAM_DAY | RULE | {"team": "", "pool": "train"}).status_code == 200
    response = get(client, user, TEAM_DAY | RULE | {"team": "beta"})
    assert response.status_code == 200 and response.context["report"].actual.card_hours == 2


@pytest.mark.parametrize("params, where, words", [
    ({"r1-down": "85"}, "Rule set 1", "below the scale-up threshold"),
    ({"r1-min": "9"}, "Rule set 1", "must not exceed the maximum"),
    ({"r1-group": "0"}, "Rule set 1", "greater than or equal to 1"),
    ({"r1-up": "101"}, "Rule set 1", "less than or equal to 100"),
    ({"r1-cooldown": ""}, "Rule set 1", "required"),
    ({"start": "2026-08-01", "end": "2026-10-05"}, "Last day", "at most 62 days"),
    ({"start": "2026-10-06", "end": "2026-10-05"}, "Last day", "not be after its last"),
    ({"end": "2026-11-03"}, "Last day", "between 2000-01-01 and today"),
    ({"start": "2025-01-01", "end": "2025-01-02"}, "First day", "kept 400 days"),
    ({"start": "5 Oct"}, "First day", "YYYY-MM-DD"),
    ({"gpu_model": "B200"}, "GPU model", "short name"),
    ({"pool": "train"}, "Team", "not both"),
])
def test_a_bad_parameter_is_refused_naming_the_field_and_the_rule(client, history, admin_user, params, where, words):
    response = get(client, admin_user, TEAM_DAY | RULE | params)
    assert response.status_code == 400
    messages = [f"{w}: {m}" for w, m in response.context["errors"]]
    assert any(m.startswith(where) and words in m for m in messages), messages
    assert words in response.content.decode().replace("&#x27;", "'")


def test_one_to_four_rule_sets(client, history, admin_user):
    none = get(client, admin_user, TEAM_DAY)
    assert none.status_code == 400 and "one to four rule sets" in none.content.decode()
    four = {f"r{n}-{k[3:]}": v for n in range(1, 5) for k, v in RULE.items()}
    response = get(client, admin_user, TEAM_DAY | four)
    assert response.status_code == 200 and len(response.context["report"].rules) == 4
    assert [f.name for f in response.context["report"].rules] == [f"Rule set {n}" for n in range(1, 5)]


def test_the_preset_is_last_month_on_the_busiest_team_with_three_rule_sets(client, history, admin_user, team_a,
                                                                           team_b):
    gpu = history.gpus[0]
    DailyUsage.objects.create(day=history.lo.date(), gpu=gpu, state="busy", team=team_b, ticks=5)
    DailyUsage.objects.create(day=history.lo.date(), gpu=gpu, state="idle", team=team_a, ticks=9)
    response = get(client, admin_user)
    assert response.status_code == 200 and response.context["preset"]
    form = response.context["form"]
    assert (form.cleaned_data["team"], form.cleaned_data["gpu_model"].short_name) == (team_a, "H200")
    assert (form.cleaned_data["start"].isoformat(), form.cleaned_data["end"].isoformat()) == ("2026-10-01", "2026-10-31")
    assert [f.name for f in response.context["report"].rules] == ["Conservative", "Balanced", "Aggressive"]
    assert 'data-testid="preset-note"' in response.content.decode()


def test_the_csv_has_a_row_per_column_and_guards_formulas(client, history, lead_a):
    response = get(client, lead_a, TEAM_DAY | RULE | {"r1-name": "=HYPERLINK(1)"}, name="boards:backtest-csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert 'filename="backtest-alpha-H200-20261005-20261005.csv"' in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [row["rule_set"] for row in rows] == ["Actually held", "'=HYPERLINK(1)"]
    actual, rule = rows
    assert actual["card_hours"] == "5.00"
    assert Decimal(rule["card_hours_saved"]) == Decimal("5.00") - Decimal(rule["card_hours"])
    assert rule["metric"] == "utilization" and rule["max_gpus"] == "8" and rule["currency"]
    assert int(rule["under_provisioned_minutes"]) >= 0 and rule["cost_saved"]


def test_the_csv_refuses_what_the_page_refuses(client, history, lead_a):
    response = get(client, lead_a, TEAM_DAY | RULE | {"team": "beta"}, name="boards:backtest-csv")
    assert response.status_code == 404


def test_the_nav_lists_the_backtest_for_leads_admins_and_finance_only(client, lead_a, engineer_b, admin_user,
                                                                       finance_user):
    for user, shown in ((lead_a, True), (admin_user, True), (finance_user, True), (engineer_b, False)):
        client.force_login(user)
        body = client.get(reverse("boards:profile")).content.decode()
        assert ('data-nav="backtest"' in body) is shown, user.username
        client.logout()


def test_the_command_prints_the_table_and_writes_the_csv(history, tmp_path):
    out, path = io.StringIO(), tmp_path / "backtest.csv"
    call_command("backtest", "--team", "alpha", "--gpu-model", "H200", "--start", "2026-10-05", "--end", "2026-10-05",
                 "--rule", "metric=utilization,up=80,down=20,group=2,min=0,max=8,cooldown=30,name=eager",
                 "--rule", "metric=memory,up=70,down=10,group=2,min=2,max=8,cooldown=60,buffer=120,headroom=0",
                 "--csv", str(path), stdout=out)
    text = out.getvalue()
    assert "actually held" in text and "eager" in text and "Rule set 2" in text and "1,440 minutes replayed" in text
    rows = list(csv.DictReader(path.open()))
    assert [row["rule_set"] for row in rows] == ["Actually held", "eager", "Rule set 2"]
    assert rows[2]["headroom_gpus"] == "0" and rows[2]["buffer_minutes"] == "120"


def test_the_command_refuses_a_bad_rule_naming_it(history):
    with pytest.raises(CommandError, match="below the scale-up threshold"):
        call_command("backtest", "--team", "alpha", "--gpu-model", "H200", "--start", "2026-10-05", "--end",
                     "2026-10-05", "--rule", "up=20,down=30,group=2,min=0,max=8,cooldown=0")
    with pytest.raises(CommandError, match="speed="):
        call_command("backtest", "--rule", "speed=1")
