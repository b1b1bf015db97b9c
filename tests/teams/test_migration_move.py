"""The teams app took over Team, Project, Membership and ApiToken from accounting (issue 13) by moving only
Django's record of them: a database from before the move keeps its rows, and its content types (so
permissions and admin history) follow the models."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("accounting", "0010_subscription_usage_failed_choices"), ("cluster", "0009_model_aliases_usage_alerts"),
          ("teams", None)]
AFTER = [("accounting", "0011_teams_app"), ("cluster", "0010_teams_app"), ("teams", "0001_initial")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    return executor.migrate(targets).apps


@pytest.mark.django_db(transaction=True)
def test_a_database_from_before_the_move_keeps_its_teams_and_their_permissions():
    try:
        old = migrate(BEFORE)
        content_type = old.get_model("contenttypes", "ContentType")
        permission = old.get_model("auth", "Permission")
        # The test database had the teams' content types; going back moved them to accounting, as they were.
        team_type, _ = content_type.objects.get_or_create(app_label="accounting", model="team")
        moved_models = ["team", "project", "membership", "apitoken"]  # teams' own later models stay in teams
        assert not content_type.objects.filter(app_label="teams", model__in=moved_models).exists()
        permission.objects.get_or_create(content_type=team_type, codename="change_team",
                                         defaults={"name": "Can change team"})
        old.get_model("accounting", "Team").objects.create(name="LLM", slug="llm", cost_centre="CC-1")

        new = migrate(AFTER)

        team = new.get_model("teams", "Team").objects.get()
        assert (team.name, team.slug) == ("LLM", "llm")
        moved = new.get_model("contenttypes", "ContentType").objects.get(pk=team_type.pk)
        assert (moved.app_label, moved.model) == ("teams", "team")
        assert new.get_model("auth", "Permission").objects.get(codename="change_team").content_type_id == moved.pk
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM accounting_team")
            assert cursor.fetchall() == [("LLM",)]  # the same table, not a copy
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
