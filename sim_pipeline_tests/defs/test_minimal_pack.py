"""A pack with only tools/, policy.md and a three-line domain.yaml runs end to end, and says how well it fits.

The world infers its entities from the tool schemas (world/infer.py); every planned situation must still be
solvable, and the summary prints the world fit per version instead of a bare verdict.
"""

import shutil

import dagster as dg
import yaml

from sim_pipeline.definitions import build_definitions
from sim_pipeline.defs.partitions import partition_key
from sim_pipeline.defs.resources import RegistryResource, SimulationResource
from sim_pipeline.domain import DOMAINS_DIR, load_domain
from sim_pipeline.registry import load_registry, versions_for
from sim_pipeline.report import render
from sim_pipeline.defs.resources import replaced

STEPS = ["search", "rollouts", "grades", "sft", "preference_pairs", "grpo_groups", "reward_model_set",
         "reward_model_pairs", "scores"]


def test_tools_and_policy_alone_run_and_report_their_fit(tmp_path, monkeypatch):
    packs = tmp_path / "packs"
    pack = packs / "minimal"
    pack.mkdir(parents=True)
    shutil.copytree(DOMAINS_DIR / "retail" / "tools", pack / "tools")
    shutil.copy(DOMAINS_DIR / "retail" / "policy.md", pack / "policy.md")
    (pack / "domain.yaml").write_text("name: minimal\ntitle: Online store support\n"
                                      "agent_role: You are the support agent of an online store.\n")
    monkeypatch.setattr("sim_pipeline.domain.DOMAINS_DIR", packs)
    assert [e.name for e in load_domain("minimal").entities] == ["order"]  # inferred from order_id and email
    registry = tmp_path / "policies.yaml"
    registry.write_text(yaml.safe_dump({"defaults": {"judge_model": "sim/judge", "user_model": "sim/user"},
                                        "policies": {"mini-v1": {"domain": "minimal", "model": "sim/agent-v1"},
                                                     "mini-v2": {"domain": "minimal", "model": "sim/agent-v2",
                                                                 "baseline": "mini-v1"}}}))
    base = tmp_path / "warehouse"
    defs = build_definitions(["minimal"], warehouse=str(base))
    resources = {**defs.resources, "registry": RegistryResource(path=str(registry)),
                 "simulation": SimulationResource(heldout_samples=2, train_samples=4, search_batch_situations=8,
                                                  search_budget_rows=64, probe_samples=0)}
    resources["gateway"] = replaced(resources["gateway"], cache_dir=str(tmp_path / "cache"))
    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("minimal_policy_version", ["mini-v1", "mini-v2"])

    def run(steps, partition):
        return dg.materialize(list(defs.assets), selection=[dg.AssetKey(["minimal", s]) for s in steps],
                              partition_key=partition, instance=instance, resources=resources, raise_on_error=False)

    assert run(["axes"], None).success
    assert run(["covering_array", "world", "situations"], "0").success
    for version in ("mini-v1", "mini-v2"):
        assert run(STEPS, partition_key(version, "0")).success, version
    assert run(["delta"], "mini-v2").success
    versions = versions_for(load_registry(registry), "minimal")
    summary = render(str(base), "minimal", "0", versions)
    assert "situations    100 planned, 100 solvable" in summary
    assert summary.count("world fit: good (") == 2, summary
    assert "  world fit     per tool" in summary and "cancel_order" in summary
    assert "delta mini-v2 vs mini-v1 on held-out tasks" in summary
