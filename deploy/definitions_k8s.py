"""The Kubernetes code location: every domain's Definitions (sim_pipeline/definitions.py, unchanged) with
dagster-k8s's `k8s_job_executor`, so each step of a run is a Kubernetes Job.

It is what the Helm chart's user-code deployment serves (deploy/helm-values.yaml): the chart's K8sRunLauncher
starts each run's orchestrator as a Job, and this executor starts each step as another Job from the same image, in
place of the Celery workers of deploy/definitions_celery.py. The Jobs read the same instance (PostgreSQL) and the
same warehouse URL (SIM_PIPELINE_WAREHOUSE, e.g. s3://...), so the Parquet is the same as under Celery.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import dagster as dg
from dagster_k8s import k8s_job_executor

from sim_pipeline.definitions import build_definitions, lazy_definitions

# Steps of one run that run as Jobs at once: a policy run has at most six steps ready together (the cuts after the
# grades), and each step Job costs a pod start (seconds), so eight leaves room without flooding the scheduler.
STEP_JOBS_IN_FLIGHT = 8
# What one step's pod asks for: a step is one Python process (a run's orchestrator peaked at 335 MB here; the
# model-calling step holds a partition's rollouts in memory) waiting on model calls most of the time.
STEP_RESOURCES = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}}
# Provider keys and the database password reach the step pods from this Secret (the chart's own password secret
# is mounted by the chart); nothing secret is in this file or the image.
SECRETS = "sim-pipeline-secrets"


def k8s_executor_config() -> dict[str, Any]:
    """The executor's config: step Jobs in flight, each step pod's resources and Secret."""
    return {"max_concurrent": STEP_JOBS_IN_FLIGHT, "resources": STEP_RESOURCES, "env_secrets": [SECRETS]}


def with_k8s_job_executor(defs: dg.Definitions, config: Mapping[str, Any] | None = None) -> dg.Definitions:
    """The same Definitions whose jobs (and asset backfills) run each step as a Kubernetes Job."""
    executor = k8s_job_executor.configured(dict(config if config is not None else k8s_executor_config()), name="k8s")
    return dg.Definitions.merge(defs, dg.Definitions(executor=executor))


# `defs` (every domain), built when Dagster's loader first asks for it, as in sim_pipeline/definitions.py.
__getattr__, __dir__ = lazy_definitions(cache(lambda: with_k8s_job_executor(build_definitions())), globals())
