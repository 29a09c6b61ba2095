"""The code location of the Celery test: its run's orchestrator and every worker import it, so each builds the same
small retail Definitions (warehouse, registry and cache from the test's environment) with the production Celery
executor (deploy/definitions_celery.py), configured by the file $SIM_PIPELINE_CELERY_CONFIG names."""

import os

from deploy.definitions_celery import with_celery_executor
from sim_pipeline_tests.deploy.locations import (
    CACHE_VARIABLE,
    REGISTRY_VARIABLE,
    WAREHOUSE_VARIABLE,
    small_definitions,
)

defs = with_celery_executor(small_definitions(os.environ[WAREHOUSE_VARIABLE], os.environ[REGISTRY_VARIABLE],
                                              os.environ[CACHE_VARIABLE]))
