"""The Celery app. Settings (broker, acks-late, time limits, routes) are the CELERY_* entries of
config/settings.py; workers name their queues: ``celery -A config worker -Q collect,rollup,default``."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("cardhour")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.autodiscover_tasks(["boards.periods"])  # boards/periods/tasks.py: a sub-package, not an app

QUEUES = ("collect", "rollup", "default")
