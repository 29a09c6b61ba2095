"""The production code location: every domain's Definitions (sim_pipeline/definitions.py, unchanged) with the
Celery executor, so each step of every run goes to a Celery worker.

Load it instead of sim_pipeline.definitions (deploy/workspace.yaml does): the UI, the daemon, each run's
orchestrator and each Celery worker import it; a worker rebuilds the run's job from it before running one step.
The executor reads deploy/celery.yaml (or the file SIM_PIPELINE_CELERY_CONFIG names), the same file the workers are
started with, so both sides name the same broker and queue.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

import dagster as dg
import yaml
from dagster_celery import celery_executor

from sim_pipeline.definitions import build_definitions, lazy_definitions

CELERY_CONFIG_VARIABLE = "SIM_PIPELINE_CELERY_CONFIG"
DEFAULT_CELERY_CONFIG = Path(__file__).with_name("celery.yaml")


def celery_config_path() -> Path:
    """The Celery config file: $SIM_PIPELINE_CELERY_CONFIG, else deploy/celery.yaml."""
    return Path(os.environ.get(CELERY_CONFIG_VARIABLE) or DEFAULT_CELERY_CONFIG)


def celery_executor_config(path: Path | None = None) -> dict[str, Any]:
    """The executor config block (`execution: config:`) of a Celery config file, `env:` references unresolved."""
    path = path or celery_config_path()
    loaded = yaml.safe_load(path.read_text()) or {}
    config = (loaded.get("execution") or {}).get("config")
    if not isinstance(config, dict):
        raise dg.DagsterInvalidConfigError(f"{path}: no 'execution: config:' block. Fix: write the executor's "
                                           "config under execution: config: (deploy/celery.yaml shows how)", [], loaded)
    return config


def with_celery_executor(defs: dg.Definitions, config: Mapping[str, Any] | None = None) -> dg.Definitions:
    """The same Definitions whose jobs (and asset backfills) run each step on a Celery worker."""
    executor = celery_executor.configured(dict(config if config is not None else celery_executor_config()),
                                          name="celery")
    return dg.Definitions.merge(defs, dg.Definitions(executor=executor))


# `defs` (every domain), built when Dagster's loader first asks for it, as in sim_pipeline/definitions.py.
__getattr__, __dir__ = lazy_definitions(cache(lambda: with_celery_executor(build_definitions())), globals())
