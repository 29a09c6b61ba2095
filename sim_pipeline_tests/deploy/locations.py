"""Small Definitions for the deploy tests: retail only, a temporary warehouse, registry and model cache, and the
run sizes of sim_pipeline_tests/defs/backfill_location.py (enough gold rows for the judge-trust check)."""

from __future__ import annotations

import dagster as dg

from sim_pipeline.definitions import build_definitions
from sim_pipeline.defs.resources import RegistryResource, SimulationResource
from sim_pipeline.defs.resources import replaced

DOMAIN = "retail"
# The sizes the backfill test's location uses: small, and the judge-trust check still sees enough gold rows.
SMALL_SIZES = {"heldout_samples": 2, "train_samples": 4, "search_batch_situations": 8, "search_budget_rows": 64,
               "probe_samples": 0}
# The versions the deploy tests run: embedded models only, so no test calls a provider.
REGISTRY = {
    "defaults": {"judge_model": "sim/judge", "user_model": "sim/user"},
    "policies": {
        "agent-v1": {"domain": DOMAIN, "model": "sim/agent-v1"},
        "agent-v2": {"domain": DOMAIN, "model": "sim/agent-v2", "baseline": "agent-v1"},
    },
}
# The test's environment names these; the Celery workers inherit it, so they build the very same location.
WAREHOUSE_VARIABLE = "SIM_PIPELINE_TEST_WAREHOUSE"
REGISTRY_VARIABLE = "SIM_PIPELINE_TEST_REGISTRY"
CACHE_VARIABLE = "SIM_PIPELINE_TEST_CACHE"


def small_definitions(warehouse: str, registry: str, cache: str, *,
                      executor: dg.ExecutorDefinition | None = None) -> dg.Definitions:
    """retail's assets and jobs with the given warehouse, registry and model cache and small run sizes."""
    built = build_definitions([DOMAIN], warehouse=warehouse)
    return dg.Definitions(assets=list(built.assets or []), jobs=list(built.jobs or []), executor=executor,
                          resources={**built.resources, "registry": RegistryResource(path=registry),
                                     "simulation": SimulationResource(**SMALL_SIZES),
                                     "gateway": replaced(built.resources["gateway"], cache_dir=cache)})
