import logging

from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import post_migrate
from django.utils.translation import gettext_lazy as _

log = logging.getLogger(__name__)


def grant_app_role(sender, using="default", **kwargs):
    """After every migration: the application's role gets its rights on the new tables (and none to change
    the append-only ones). Created here when missing and the migrating role may create roles; otherwise
    an operator runs ``manage.py db_app_role`` as one that may."""
    from django.db import connections

    from teams.audit.grants import RoleMissing, ensure_role, grant_app_rights

    name = settings.CARDHOUR_DB_APP_ROLE
    if not name:
        return
    connection = connections[using]
    try:
        ensure_role(connection, name)
    except RoleMissing:
        log.warning("The database role %s is missing and %s may not create it: run manage.py db_app_role as a "
                    "role that may.", name, connection.settings_dict.get("USER"))
        return
    grant_app_rights(connection, name)


def name_task_actor(task=None, **kwargs):
    """Changes a Celery task makes without a person are recorded as made by the task (its name)."""
    from teams.audit.records import begin_acting

    task.request.cardhour_audit_token = begin_acting(f"task:{task.name}")


def forget_task_actor(task=None, **kwargs):
    from teams.audit.records import end_acting

    token = getattr(task.request, "cardhour_audit_token", None)
    if token is not None:
        end_acting(token)


class TeamsConfig(AppConfig):
    name = "teams"
    verbose_name = _("Teams and people")

    def ready(self):
        from celery.signals import task_postrun, task_prerun

        # Sent after the whole migration plan ran, so every table (the ledger's too) exists by then.
        post_migrate.connect(grant_app_role, sender=self, dispatch_uid="cardhour.grant_app_role")
        task_prerun.connect(name_task_actor, weak=False, dispatch_uid="cardhour.audit.task_actor")
        task_postrun.connect(forget_task_actor, weak=False, dispatch_uid="cardhour.audit.task_actor_end")
