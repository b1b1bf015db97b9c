# The Celery app is loaded with Django, so tasks sent from web processes, manage.py and tests use
# Cardhour's broker settings (not Celery's default app).
from config.celery import app as celery_app

__all__ = ("celery_app",)
