"""The judge-trust gate across runs: automation does not request cuts past a failed gate; a registry opt-out lets
them through and is recorded on every cut row."""

import dagster as dg
import pytest
import yaml

from sim_pipeline import warehouse
from sim_pipeline.defs.partitions import partition_key
from sim_pipeline.defs.resources import RegistryResource
from sim_pipeline_tests.defs.conftest import REGISTRY

CUTS = ["sft", "preference_pairs", "grpo_groups", "reward_model_set", "reward_model_pairs"]
OPT_OUT = "lenient-optout"
GATED = [partition_key("agent-v1", "0"), partition_key("lenient-v2", "0"), partition_key(OPT_OUT, "0")]


def keys(*steps):
    return [dg.AssetKey(["retail", s]) for s in steps]


@pytest.fixture
def gate(small_defs, instance, tmp_path):
    """The small setup plus a version that keeps the lenient judge but opts out of the gate in the registry."""
    assets, resources, base = small_defs
    registry = {**REGISTRY, "policies": {**REGISTRY["policies"], OPT_OUT: {
        "domain": "retail", "model": "sim/agent-v1", "judge_model": "sim/judge-lenient", "judge_trust_opt_out": True,
        "baseline": "agent-v1"}}}
    path = tmp_path / "gate_policies.yaml"
    path.write_text(yaml.safe_dump(registry))
    resources = {**resources, "registry": RegistryResource(path=str(path))}
    instance.add_dynamic_partitions("retail_policy_version", [OPT_OUT])
    assert dg.materialize(assets, selection=keys("axes"), instance=instance, resources=resources).success
    assert dg.materialize(assets, selection=keys("covering_array", "world", "situations"), partition_key="0",
                          instance=instance, resources=resources).success
    return assets, resources, base


def judge_trust(result):
    [check] = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
               and e.event_specific_data.check_name == "judge_trust"]
    return check


def test_automation_does_not_request_cuts_past_a_failed_gate(gate, instance):
    assets, resources, _ = gate
    defs = dg.Definitions(assets=assets, resources=resources)
    cuts = dg.AssetSelection.assets(*keys(*CUTS))
    # The automation sensor's ticks: one before the policy runs (nothing to do: grades are missing) ...
    before = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=cuts)
    assert before.total_requested == 0
    passed = {}
    for key in GATED:
        result = dg.materialize(assets, selection=keys("search", "rollouts", "grades"), partition_key=key,
                                instance=instance, resources=resources, raise_on_error=False)
        passed[key] = judge_trust(result).passed
    assert passed == {GATED[0]: True, GATED[1]: False, GATED[2]: True}
    # ... and the next one, after grades were updated: cuts behind a passed (or opted-out) gate are requested, the
    # cuts behind the failed gate are not.
    after = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=cuts, cursor=before.cursor)
    for cut in keys(*CUTS):
        assert after.get_requested_partitions(cut) == {GATED[0], GATED[2]}, cut
    # Later ticks still refuse: nothing about the failed partition changed.
    later = dg.evaluate_automation_conditions(defs=defs, instance=instance, asset_selection=cuts, cursor=after.cursor)
    assert not any(GATED[1] in later.get_requested_partitions(cut) for cut in keys(*CUTS))


def test_opt_out_publishes_and_is_recorded_on_every_cut_row(gate, instance):
    assets, resources, base = gate
    steps = ["search", "rollouts", "grades", *CUTS]
    for version, opted in ((OPT_OUT, True), ("agent-v1", False)):
        result = dg.materialize(assets, selection=keys(*steps), partition_key=partition_key(version, "0"),
                                instance=instance, resources=resources, raise_on_error=False)
        assert result.success, version
        check = judge_trust(result)
        assert check.passed and check.metadata["opt_out"].value is opted
        assert check.metadata["verdict"].text == ("untrusted" if opted else "trusted")
        assert ("opted out" in (check.description or "")) is opted
        rows = 0
        for cut in CUTS:
            table = warehouse.read_table(warehouse.partition_path(base, "retail", cut, policy_version=version,
                                                                  seed="0"))
            assert "judge_trust_opt_out" in table.columns and (table["judge_trust_opt_out"] == opted).all(), cut
            rows += len(table)
        assert rows > 0
    # The opt-out lets the delta be written from the untrusted grades, but its ship line decides nothing from them.
    delta = dg.materialize(assets, selection=keys("delta"), partition_key=OPT_OUT, instance=instance,
                           resources=resources, raise_on_error=False)
    [event] = delta.get_asset_materialization_events()
    assert list(event.materialization.metadata)[0] == "ship"
    assert event.materialization.metadata["ship"].value.startswith(
        f"INCONCLUSIVE {OPT_OUT} over agent-v1: judge trust untrusted for {OPT_OUT} seed 0, so no decision")
