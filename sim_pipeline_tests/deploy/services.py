"""The machine's services the deploy tests use (PostgreSQL and Redis on loopback), a fresh database per test, and a
DAGSTER_HOME holding the production deploy/dagster.yaml, unchanged, pointed at that database.

A service that is not there skips its tests outside CI; under CI (the CI variable set) they fail instead, so a CI
machine without the service can never pass by skipping.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PRODUCTION_INSTANCE = REPO / "deploy" / "dagster.yaml"
PRODUCTION_CELERY = REPO / "deploy" / "celery.yaml"
POSTGRES = ("127.0.0.1", 5432)  # loopback only: the tests never reach another host
REDIS = ("127.0.0.1", 6379)
PG_USER = "postgres"  # trust authentication on this machine and CI's: no password
PG_MAINTENANCE_DB = "test"  # an existing database to connect to while creating and dropping the test's own
# Trust authentication ignores a password, so the tests give one nobody uses and check it is written nowhere.
PG_PASSWORD_SENTINEL = "sentinel-pg-password-3f9c2e7b"
CONNECT_TIMEOUT_S = 3  # a loopback service answers in milliseconds; three seconds means it is not there


def _missing(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: CI must provide it, so this test fails rather than skips")
    pytest.skip(f"{reason}: provide it to run this test (under CI it would fail)")


def require(service: str, address: tuple[str, int]) -> None:
    """Skip the test when the service does not accept connections, or fail it under CI."""
    try:
        socket.create_connection(address, timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        _missing(f"{service} is not reachable at {address[0]}:{address[1]} ({exc})")


def require_modules(*modules: str) -> None:
    """Skip the test when a module of the [scale] extra is not installed, or fail it under CI."""
    absent = [name for name in modules if importlib.util.find_spec(name) is None]
    if absent:
        _missing(f"{', '.join(absent)} not installed (the [scale] extra: .venv/bin/pip install -e '.[dev,scale]')")


def _connect(database: str):
    import psycopg2  # comes with dagster-postgres (the [scale] extra)

    return psycopg2.connect(host=POSTGRES[0], port=POSTGRES[1], user=PG_USER, dbname=database,
                            connect_timeout=CONNECT_TIMEOUT_S)


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new, empty PostgreSQL database for one test, dropped afterwards (its connections closed first)."""
    from psycopg2 import sql

    name = f"sim_pipeline_test_{uuid.uuid4().hex[:12]}"
    admin = _connect(PG_MAINTENANCE_DB)
    admin.autocommit = True  # CREATE/DROP DATABASE cannot run inside a transaction
    try:
        with admin.cursor() as cursor:
            cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        yield name
    finally:
        with admin.cursor() as cursor:
            cursor.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        admin.close()


def database_exists(name: str) -> bool:
    """Whether a database of that name exists (the cleanup test's check)."""
    connection = _connect(PG_MAINTENANCE_DB)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            return cursor.fetchone() is not None
    finally:
        connection.close()


def query(database: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows of one SELECT, read straight from PostgreSQL (not through Dagster)."""
    connection = _connect(database)
    try:
        with connection.cursor() as cursor:
            cursor.execute(statement, params)
            return cursor.fetchall()
    finally:
        connection.close()


def production_home(home: Path, database: str) -> dict[str, str]:
    """Copy deploy/dagster.yaml into `home`; returns the environment that points it at `database`."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(PRODUCTION_INSTANCE, home / "dagster.yaml")
    return {"DAGSTER_HOME": str(home), "DAGSTER_PG_HOST": POSTGRES[0], "DAGSTER_PG_PORT": str(POSTGRES[1]),
            "DAGSTER_PG_USER": PG_USER, "DAGSTER_PG_PASSWORD": PG_PASSWORD_SENTINEL, "DAGSTER_PG_DB": database}
