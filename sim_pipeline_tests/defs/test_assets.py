"""The asset graph materializes end to end on an ephemeral instance, and the judge-trust gate blocks the cuts."""

import re

import dagster as dg
import pandas as pd

import pytest

from sim_pipeline import defaults, warehouse
from sim_pipeline.defs.partitions import partition_key
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.grade import judge_trust
from sim_pipeline.registry import load_registry, versions_for
from sim_pipeline.report import render
from sim_pipeline_tests.scripted_server import ScriptedServer, always
from sim_pipeline.defs.resources import replaced

SEED_STEPS = ["axes", "covering_array", "world", "situations"]
POLICY_STEPS = ["search", "rollouts", "grades", "sft", "preference_pairs", "grpo_groups", "reward_model_set",
                "reward_model_pairs", "scores"]
CUTS = ["sft", "preference_pairs", "grpo_groups", "reward_model_set", "reward_model_pairs"]


def keys(*steps):
    return [dg.AssetKey(["retail", s]) for s in steps]


def run(assets, resources, instance, steps, partition):
    return dg.materialize(assets, selection=keys(*steps), partition_key=partition, instance=instance,
                          resources=resources, raise_on_error=False)


def materialized(result):
    return {tuple(e.asset_key.path) for e in result.get_asset_materialization_events()}


def check_results(result):
    return {(tuple(e.event_specific_data.asset_key.path), e.event_specific_data.check_name):
            e.event_specific_data.passed for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}


def test_whole_graph_materializes_for_one_partition(small_defs, instance, registry_path):
    assets, resources, base = small_defs
    assert run(assets, resources, instance, ["axes"], None).success
    assert run(assets, resources, instance, SEED_STEPS[1:], "0").success
    for version in ("agent-v1", "agent-v2"):
        result = run(assets, resources, instance, POLICY_STEPS, partition_key(version, "0"))
        assert result.success, version
        assert materialized(result) == {("retail", s) for s in POLICY_STEPS}
        checks = check_results(result)
        assert checks[(("retail", "grades"), "judge_trust")] is True
        assert checks[(("retail", "rollouts"), "row_schema")] is True
        assert checks[(("retail", "rollouts"), "world_fit")] is True
        assert all(checks[(("retail", c), "publish_gate")] for c in CUTS)
    delta = run(assets, resources, instance, ["delta"], "agent-v2")
    assert delta.success
    [event] = delta.get_asset_materialization_events()
    meta = event.materialization.metadata
    assert list(meta)[:2] == ["ship", "guarded"]  # the UI shows the ship line first, then the guarded metrics
    ship = meta["ship"].value
    assert re.match(r"(SHIP|DO NOT SHIP|INCONCLUSIVE) agent-v2 over agent-v1: ", ship), ship
    table = warehouse.read_table(warehouse.partition_path(base, "retail", "delta", policy_version="agent-v2"))
    assert {"pass@1", "pass^2", "pass@2"} <= set(table["metric"])
    assert list(table.columns[:12]) == ["metric", "baseline", "candidate", "n_tasks", "before", "after", "delta",
                                        "ci_low", "ci_high", "p_value", "p_adjusted", "verdict"]
    rollouts = warehouse.read_table(warehouse.partition_path(base, "retail", "rollouts", policy_version="agent-v1",
                                                             seed="0"))
    assert rollouts["rollout_id"].is_unique
    assert set(rollouts["split"]) == {"heldout", "train"}
    assert (rollouts["logprob"] <= 0).all() and rollouts["messages"].map(len).min() >= 2
    grades = warehouse.read_table(warehouse.partition_path(base, "retail", "grades", policy_version="agent-v1",
                                                           seed="0"))
    assert grades["judge_version"].str.match(r"^sim/judge@[0-9a-f]{12}$").all()
    summary = render(str(base), "retail", "0", [v for v in versions_for(load_registry(registry_path), "retail")
                                                if v.slug in ("agent-v1", "agent-v2")])
    assert summary.count("world fit: good (") == 2
    assert summary.splitlines()[1] == f"  ship          {ship}"  # the summary leads with the line the UI shows
    assert "cancel_order" in summary[summary.index("  world fit     per tool"):]


def test_untrusted_judge_blocks_the_cuts_in_the_same_run(small_defs, instance, registry_path):
    assets, resources, base = small_defs
    run(assets, resources, instance, ["axes"], None)
    run(assets, resources, instance, SEED_STEPS[1:], "0")
    # A cut an earlier run left for this partition: the summary must not show it as this run's.
    stale = warehouse.partition_path(base, "retail", "sft", policy_version="lenient-v2", seed="0")
    warehouse.write_table(stale, pd.DataFrame({"rollout_id": ["old"] * 54}))
    result = run(assets, resources, instance, POLICY_STEPS, partition_key("lenient-v2", "0"))
    assert not result.success
    assert check_results(result)[(("retail", "grades"), "judge_trust")] is False
    done = materialized(result)
    assert ("retail", "grades") in done
    assert not done & {("retail", c) for c in CUTS}
    versions = [v for v in versions_for(load_registry(registry_path), "retail") if v.slug == "lenient-v2"]
    summary = render(str(base), "retail", "0", versions)
    assert "cuts: withheld (judge trust untrusted: the publish gates wrote no cut)" in summary and "sft 54" not in summary
    assert summary.splitlines()[1] == ("  ship          INCONCLUSIVE lenient-v2 over agent-v1: judge trust untrusted "
                                       "for lenient-v2 seed 0, so no decision is drawn from the delta")


def test_a_cut_its_gate_refuses_writes_nothing_and_removes_the_earlier_file(small_defs, instance):
    assets, resources, base = small_defs
    run(assets, resources, instance, ["axes"], None)
    run(assets, resources, instance, SEED_STEPS[1:], "0")
    assert run(assets, resources, instance, ["search", "rollouts", "grades"], partition_key("lenient-v2", "0")).success \
        is False  # the lenient judge: grades untrusted
    sft = warehouse.partition_path(base, "retail", "sft", policy_version="lenient-v2", seed="0")
    warehouse.write_table(sft, pd.DataFrame({"rollout_id": ["from an earlier run"]}))
    result = run(assets, resources, instance, ["sft"], partition_key("lenient-v2", "0"))  # run on its own
    assert not result.success and check_results(result)[(("retail", "sft"), "publish_gate")] is False
    assert ("retail", "sft") not in materialized(result) and not sft.exists()


def test_the_grades_step_records_its_verdict_once_and_the_cuts_obey_that_record(small_defs, instance, monkeypatch):
    assets, resources, base = small_defs
    run(assets, resources, instance, ["axes"], None)
    run(assets, resources, instance, SEED_STEPS[1:], "0")
    key = partition_key("agent-v1", "0")
    result = run(assets, resources, instance, ["search", "rollouts", "grades"], key)
    assert check_results(result)[(("retail", "grades"), "judge_trust")] is True
    path = warehouse.partition_path(base, "retail", "grades", policy_version="agent-v1", seed="0")
    grades = warehouse.read_table(path)
    assert set(grades["judge_trust"]) == {"trusted"} and set(grades["judge_trust_flags"]) == {"[]"}

    def recomputed(*args, **kwargs):
        raise AssertionError("a cut recomputed the verdict instead of reading the record")

    monkeypatch.setattr(judge_trust, "judge_trust_report", recomputed)
    cut = run(assets, resources, instance, ["sft"], key)  # the gate reads the recorded verdict
    assert cut.success and check_results(cut)[(("retail", "sft"), "publish_gate")] is True


def test_a_changed_input_file_is_refused_naming_the_file_and_the_fix(small_defs, instance):
    assets, resources, base = small_defs
    run(assets, resources, instance, ["axes"], None)
    run(assets, resources, instance, SEED_STEPS[1:], "0")
    key = partition_key("agent-v1", "0")
    run(assets, resources, instance, ["search", "rollouts", "grades"], key)
    path = warehouse.partition_path(base, "retail", "grades", policy_version="agent-v1", seed="0")
    grades = warehouse.read_table(path)
    # Rewritten with a consistent checksum beside it (a restore, another tool): not the file this instance made.
    warehouse.write_table(path, grades.assign(judge_trust="untrusted"))
    refused = run(assets, resources, instance, ["sft"], key)
    assert not refused.success and not warehouse.partition_path(base, "retail", "sft", policy_version="agent-v1",
                                                                 seed="0").exists()
    [failure] = [e for e in refused.all_events if e.event_type_value == "STEP_FAILURE"]
    message = str(failure.event_specific_data.error)
    assert str(path) in message and "Fix: rematerialize retail/grades for policy_version=agent-v1, seed=0" in message
    # One flipped byte with the old checksum beside it: the read itself refuses.
    content = bytearray(path.read_bytes())
    content[len(content) // 2] ^= 0x01
    path.write_bytes(bytes(content))
    with pytest.raises(SimPipelineError, match="does not match the sha256 recorded"):
        warehouse.read_table(path)


def test_same_seed_gives_same_rollout_bytes(small_defs, instance, tmp_path):
    assets, resources, base = small_defs
    run(assets, resources, instance, ["axes"], None)
    run(assets, resources, instance, SEED_STEPS[1:], "0")
    path = warehouse.partition_path(base, "retail", "rollouts", policy_version="agent-v2", seed="0")
    contents = []
    for _ in range(2):
        result = run(assets, resources, instance, ["search", "rollouts"], partition_key("agent-v2", "0"))
        contents.append(path.read_bytes())
    assert contents[0] == contents[1]  # no wall-clock column in the table: byte for byte
    [latency] = [e.event_specific_data.materialization.metadata["latency_s"].value for e in result.all_events
                 if e.event_type_value == "ASSET_MATERIALIZATION" and e.asset_key.path[-1] == "rollouts"]
    assert set(latency) == {"p50", "p95", "max"}  # timings stay visible, as metadata


@pytest.mark.parametrize("slug", ["broken-v1", "http-v1"])
def test_an_agent_whose_every_call_fails_stops_the_run_before_anything_is_written(small_defs, instance, registry_path,
                                                                                 slug, monkeypatch):
    """User code that raises, or an HTTP endpoint that answers 500: the circuit breaker stops the run after
    MAX_CONSECUTIVE_FAILURES failed calls in a row, names the model and the fix, and nothing of it is written."""
    assets, resources, base = small_defs
    server = ScriptedServer(always(500)).start()
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL"):
        monkeypatch.setenv(name, server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    resources = {**resources, "gateway": replaced(resources["gateway"], backoff_s=0.0)}
    try:
        run(assets, resources, instance, ["axes"], None)
        run(assets, resources, instance, SEED_STEPS[1:], "0")
        assert run(assets, resources, instance, POLICY_STEPS, partition_key("agent-v1", "0")).success
        result = run(assets, resources, instance, POLICY_STEPS, partition_key(slug, "0"))
    finally:
        server.stop()
    assert not result.success and materialized(result) == set()
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = failure.event_specific_data.error.to_string()  # the step error and its cause
    assert "failed in a row" in message and "circuit breaker" in message and "Fix:" in message
    for asset in ("rollouts", "grades"):
        assert not warehouse.partition_path(base, "retail", asset, policy_version=slug, seed="0").exists()
    if slug == "http-v1":  # the breaker stopped it: the calls in flight when it tripped, not every rollout's
        assert 0 < len(server.requests) <= defaults.MAX_CONSECUTIVE_FAILURES * defaults.GATEWAY_TRIES + \
            defaults.GATEWAY_CONCURRENCY
        back, flying = (int(n or 0) for n in re.search(
            r"; (\d+) requests to it came back in all(?:, (\d+) more were in flight)?", message).groups())
        assert back <= len(server.requests) <= back + flying  # counted as the server saw them
    versions = versions_for(load_registry(registry_path), "retail")
    summary = render(str(base), "retail", "0", [v for v in versions if v.slug in ("agent-v1", slug)])
    assert "held-out pass@1 0." in summary[:summary.index(f"  {slug}")]  # the healthy version still scores
    assert f"  {slug:<13} not run for seed 0" in summary  # no rows: no score, not a zero
    assert "pass@1 0." not in summary[summary.index(f"  {slug}"):]


def test_no_delta_is_written_from_untrusted_grades(small_defs, instance, registry_path):
    assets, resources, base = small_defs
    run(assets, resources, instance, ["axes"], None)
    run(assets, resources, instance, SEED_STEPS[1:], "0")
    assert run(assets, resources, instance, POLICY_STEPS, partition_key("agent-v1", "0")).success
    run(assets, resources, instance, ["search", "rollouts", "grades"], partition_key("lenient-v2", "0"))
    stale = warehouse.partition_path(base, "retail", "delta", policy_version="lenient-v2")
    warehouse.write_table(stale, pd.DataFrame({"metric": ["pass@1"], "delta": [0.9]}))  # an earlier run's
    result = run(assets, resources, instance, ["delta"], "lenient-v2")
    assert not result.success and ("retail", "delta") not in materialized(result) and not stale.exists()
    [check] = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert not check.passed and "judge trust of lenient-v2 seed 0 is not trusted" in check.description
    versions = [v for v in versions_for(load_registry(registry_path), "retail") if v.slug in ("agent-v1", "lenient-v2")]
    summary = render(str(base), "retail", "0", versions)
    assert "delta lenient-v2 vs agent-v1: withheld (judge trust not trusted for lenient-v2" in summary
