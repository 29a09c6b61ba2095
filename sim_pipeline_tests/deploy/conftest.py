"""Fixtures of the deploy tests: a fresh PostgreSQL database with the production instance on it, a registry, and the
Celery broker.

deploy/ is not part of the installed package: the repository root goes on sys.path here, before any test module
imports `deploy`, whether pytest runs as `python -m pytest` (which adds the working directory) or as `pytest`.
"""

import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
import yaml

from sim_pipeline_tests.deploy.locations import REGISTRY
from sim_pipeline_tests.deploy.services import (
    CELERY_BROKER,
    POSTGRES,
    RABBITMQ,
    REPO,
    fresh_database,
    production_home,
    require,
    require_modules,
)

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.fixture
def registry_path(tmp_path) -> Path:
    """The deploy tests' registry (embedded models only) in a temporary file."""
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump(REGISTRY))
    return path


@pytest.fixture
def postgres_home(tmp_path, monkeypatch) -> Iterator[tuple[Path, str]]:
    """A DAGSTER_HOME holding deploy/dagster.yaml, its DAGSTER_PG_* variables set to a fresh database (dropped
    after the test); yields (home, database)."""
    require_modules("dagster_postgres", "psycopg2")
    require("PostgreSQL", POSTGRES)
    home = tmp_path / "dagster_home"
    with fresh_database() as database:
        for name, value in production_home(home, database).items():
            monkeypatch.setenv(name, value)
        yield home, database


@pytest.fixture
def production_instance(postgres_home) -> Iterator[dg.DagsterInstance]:
    """The instance deploy/dagster.yaml describes, on the test's database."""
    instance = dg.DagsterInstance.from_config(str(postgres_home[0]))
    try:
        yield instance
    finally:
        instance.dispose()


@pytest.fixture
def celery_broker() -> str:
    """The broker URL of a Celery test's workers and orchestrators (celery_environment): the machine's RabbitMQ."""
    require("RabbitMQ", RABBITMQ)
    return CELERY_BROKER
