"""The demo cluster (floor 8): months of realistic history, teams, bookings and money, loaded through the
services by ``manage.py load_demo``. Nothing imports it."""
