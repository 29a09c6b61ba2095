"""The code location the backfill test loads (as the daemon would): retail with the temporary warehouse, registry
and cache the test names in the environment, small run sizes, and steps in the run's process (no subprocess per step)."""

import os

import dagster as dg

from sim_pipeline.definitions import build_definitions
from sim_pipeline.defs.resources import RegistryResource, SimulationResource
from sim_pipeline.defs.resources import replaced

_built = build_definitions(["retail"], warehouse=os.environ.get("SIM_PIPELINE_TEST_WAREHOUSE", "data/warehouse"))
defs = dg.Definitions(assets=list(_built.assets or []), jobs=list(_built.jobs or []), executor=dg.in_process_executor,
                      resources={
    **_built.resources,
    "registry": RegistryResource(path=os.environ.get("SIM_PIPELINE_TEST_REGISTRY", "data/policies.yaml")),
    "simulation": SimulationResource(heldout_samples=2, train_samples=4, search_batch_situations=8,
                                     search_budget_rows=64, probe_samples=0),
    "gateway": replaced(_built.resources["gateway"], cache_dir=os.environ.get("SIM_PIPELINE_TEST_CACHE")),
})
