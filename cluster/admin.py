"""The cluster app's admin pages live beside their domains; Django's autodiscovery imports this module."""

from cluster.bookings import admin as bookings_admin  # noqa: F401
from cluster.inventory import admin as inventory_admin  # noqa: F401
from cluster.jobs import admin as jobs_admin  # noqa: F401
from cluster.status import admin as status_admin  # noqa: F401
