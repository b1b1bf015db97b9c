#!/usr/bin/env python
"""Django's command-line utility. With DATABASE_URL/REDIS_URL unset it runs against the embedded
PostgreSQL and Redis of ``var/local`` (started here, by the supervisor, if they are not running)."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    if not os.environ.get("DATABASE_URL") or not os.environ.get("REDIS_URL"):
        from config.embedded import local_environment

        os.environ.update(local_environment("local"))
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
