"""A small, fast Dagster setup: one domain, a temporary warehouse and registry, small run sizes."""

import dagster as dg
import pytest
import yaml

from sim_pipeline.definitions import build_definitions
from sim_pipeline.defs.resources import RegistryResource, SimulationResource
from sim_pipeline.defs.resources import replaced

REGISTRY = {
    "defaults": {"judge_model": "sim/judge", "user_model": "sim/user"},
    "policies": {
        "agent-v1": {"domain": "retail", "model": "sim/agent-v1"},
        "agent-v2": {"domain": "retail", "model": "sim/agent-v2", "baseline": "agent-v1"},
        "lenient-v2": {"domain": "retail", "model": "sim/agent-v1", "judge_model": "sim/judge-lenient",
                       "baseline": "agent-v1"},
        # An endpoint that fails every call: nothing it produced may be graded, scored, cut or compared.
        "broken-v1": {"domain": "retail", "model": "python:sim_pipeline_tests.models.agents_for_tests:broken",
                      "baseline": "agent-v1"},
        "http-v1": {"domain": "retail", "model": "openai/scripted-agent", "baseline": "agent-v1"},  # a real endpoint
    },
}


@pytest.fixture
def registry_path(tmp_path):
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump(REGISTRY))
    return path


@pytest.fixture
def small_defs(tmp_path, registry_path):
    """Definitions for retail with a temporary warehouse, the test registry and small run sizes."""
    defs = build_definitions(["retail"], warehouse=str(tmp_path / "warehouse"))
    resources = dict(defs.resources)
    resources["registry"] = RegistryResource(path=str(registry_path))
    resources["simulation"] = SimulationResource(heldout_samples=2, train_samples=4, search_batch_situations=8,
                                                 search_budget_rows=64, probe_samples=0)
    resources["gateway"] = replaced(resources["gateway"], cache_dir=str(tmp_path / "cache"))
    return list(defs.assets), resources, tmp_path / "warehouse"


@pytest.fixture
def instance():
    inst = dg.DagsterInstance.ephemeral()
    inst.add_dynamic_partitions("retail_policy_version", list(REGISTRY["policies"]))
    return inst
