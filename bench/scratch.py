"""A scratch database for a tool run (the bench, the load scenario): on the embedded PostgreSQL or on
DATABASE_URL's server, dropped and created afresh."""

from __future__ import annotations


def with_database(url: str, name: str) -> str:
    """``url`` with its database name replaced by ``name`` (query string kept)."""
    head, _sep, tail = url.rpartition("/")
    query = ""
    if "?" in tail:
        tail, query = tail.split("?", 1)
        query = "?" + query
    return f"{head}/{name}{query}"


def recreate_database(config: dict, name: str) -> None:
    """Drop and create database ``name`` through the server that ``config`` (dj-database-url's) names."""
    import psycopg

    kwargs = {k: v for k, v in {"host": config["HOST"], "port": config["PORT"] or None, "user": config["USER"],
              "password": config["PASSWORD"] or None, "dbname": config["NAME"]}.items() if v}
    with psycopg.connect(**kwargs, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
