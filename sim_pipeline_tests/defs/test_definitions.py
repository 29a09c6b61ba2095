"""The Definitions load, and the asset graph has the shape the docs promise (a snapshot of keys, deps, checks)."""

import datetime

import dagster as dg
from dagster import build_schedule_context, instance_for_test

from sim_pipeline.definitions import build_definitions, defs
from sim_pipeline.defs.partitions import partition_key

STEPS = ["axes", "covering_array", "world", "situations", "search", "rollouts", "grades", "sft", "preference_pairs",
         "grpo_groups", "reward_model_set", "reward_model_pairs", "scores", "delta"]


def test_definitions_are_loadable():
    dg.Definitions.validate_loadable(defs)


def test_graph_snapshot():
    graph = build_definitions(["retail"]).resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {f"retail/{s}" for s in STEPS}
    deps = {k.to_user_string(): sorted(p.to_user_string() for p in graph.get(k).parent_keys)
            for k in graph.get_all_asset_keys()}
    assert deps["retail/situations"] == ["retail/covering_array", "retail/world"]
    assert deps["retail/rollouts"] == ["retail/situations", "retail/world"]
    assert deps["retail/grades"] == ["retail/rollouts", "retail/search", "retail/situations"]
    assert deps["retail/sft"] == ["retail/grades", "retail/rollouts"]
    assert deps["retail/delta"] == ["retail/grades"]
    assert deps["retail/scores"] == ["retail/grades", "retail/rollouts", "retail/situations"]  # the no-op floor
    checks = {(c.asset_key.to_user_string(), c.name) for c in graph.asset_check_keys}
    assert {("retail/grades", "judge_trust"), ("retail/rollouts", "row_schema"), ("retail/rollouts", "rollout_health"),
            ("retail/sft", "publish_gate"),
            ("retail/grpo_groups", "publish_gate"), ("retail/delta", "must_not_regress")} <= checks
    assert graph.get(dg.AssetKey(["retail", "grades"])).partitions_def.partition_dimension_names == \
        ["policy_version", "seed"]
    assert graph.get(dg.AssetKey(["retail", "sft"])).automation_condition is not None


def test_nightly_schedule_requests_one_run_per_seed_for_the_newest_version():
    schedule = next(s for s in defs.schedules if s.name == "retail_nightly")
    with instance_for_test() as instance:
        instance.add_dynamic_partitions("retail_policy_version", ["agent-v1", "agent-v2"])
        context = build_schedule_context(instance=instance, repository_def=defs.get_repository_def(),
                                         scheduled_execution_time=datetime.datetime(2026, 11, 30, 2))
        result = schedule.evaluate_tick(context)
    keys = [r.partition_key for r in result.run_requests]
    assert result.run_requests[0].run_key == "agent-v2|0|2026-11-30"
    assert keys == [partition_key("agent-v2", s) for s in [str(i) for i in range(8)]]
