"""Scratch schemas and tables on the test MariaDB for one test: created empty, dropped afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pymysql


@contextmanager
def scratch_schema(settings: Any, schema: str, *tables: str,
                   **connect: Any) -> Iterator[pymysql.connections.Connection]:
    """An admin connection (autocommit) to ``schema``, recreated with ``tables`` (each ``name (columns) options``,
    as after CREATE TABLE); ``connect`` adds to the connection's arguments (an init_command, say)."""
    conn = pymysql.connect(**settings.admin_kwargs(**connect))
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {schema}")
            cur.execute(f"CREATE DATABASE {schema}")
            for table in tables:
                cur.execute(f"CREATE TABLE {schema}.{table}")
        yield conn
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {schema}")
    finally:
        conn.close()


@contextmanager
def scratch_table(conn: pymysql.connections.Connection, name: str, definition: str) -> Iterator[str]:
    """Table ``name`` (``schema.table``) recreated on ``conn`` as ``CREATE TABLE name definition``; yields the name
    and drops the table afterwards."""
    with conn.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS {name}")
        cur.execute(f"CREATE TABLE {name} {definition}")
    try:
        yield name
    finally:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {name}")
