"""The Definitions load, and the asset graph has the shape the docs promise (a snapshot of keys, deps, checks)."""


import dagster as dg

from sim_pipeline.definitions import build_definitions, defs

STEPS = ["axes", "covering_array", "world", "situations", "search", "rollouts", "grades", "sft", "preference_pairs",
         "grpo_groups", "reward_model_set", "reward_model_pairs", "scores", "delta", "trained_policy"]


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
    # Step 09 reads the three training cuts, and nothing starts it on its own: training is a decision.
    assert deps["retail/trained_policy"] == ["retail/grpo_groups", "retail/preference_pairs", "retail/sft"]
    assert graph.get(dg.AssetKey(["retail", "trained_policy"])).automation_condition is None


def test_every_job_schedule_and_sensor_says_what_it_does():
    for item in [*defs.jobs, *defs.schedules, *defs.sensors]:
        assert item.description, item.name
