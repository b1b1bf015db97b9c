"""The accounting app's admin pages live beside their domains; Django's autodiscovery imports this module."""

from accounting.money import admin as money_admin  # noqa: F401
from accounting.notify import admin as notify_admin  # noqa: F401
