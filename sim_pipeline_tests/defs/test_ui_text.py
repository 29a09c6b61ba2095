"""What the Dagster UI shows a reader: links to a version's own partition, narrow tables with the decisive columns,
a failed run's error naming the check and its reason, the steps in order, rounded numbers, plain words, and the
automation and instance settings behind the pages."""

import re
import shutil
from pathlib import Path

import dagster as dg
import pandas as pd
import pytest
import yaml

from sim_pipeline import defaults
from sim_pipeline.defs import automation, checks
from sim_pipeline.defs.assets import DELTA_UI_COLUMNS, HACK_SCAN_UI_COLUMNS, world_fit_tables
from sim_pipeline.defs.metadata import STEP_TAG, partition_path, rounded, split_tables, version_links
from sim_pipeline.defs.partitions import partition_key, seed_by_version
from sim_pipeline.definitions import build_definitions
from sim_pipeline.rollout.world_fit import FIT_COLUMNS
from sim_pipeline_tests.defs.test_assets import SEED_STEPS, run

# The widest table that still shows every column beside the UI's metadata labels at 1600 px (the report:
# the delta's 6th column and the hack scan's 5th were already out of sight, so the decisive ones go first and no
# table has more than this many columns).
MAX_UI_COLUMNS = 8


def test_a_partition_link_opens_the_partitions_tab_on_that_partition():
    # The Overview tab ignores `partition=` and shows the newest materialization of any partition; the Partitions
    # tab reads it, a multi-partition key split on '|' into its dimensions in the definition's order.
    key = partition_key("agent-v2", "0")
    assert str(key) in seed_by_version("retail").get_partition_keys(
        dynamic_partitions_store=_store({"retail_policy_version": ["agent-v2"]}))
    assert partition_path("retail", "grades", key) == "/assets/retail/grades?view=partitions&partition=agent-v2%7C0"
    assert partition_path("retail", "delta", "agent-v2") == "/assets/retail/delta?view=partitions&partition=agent-v2"


def test_every_version_line_links_to_its_own_partitions_only():
    text = version_links("retail", [("candidate", "myAgent.v3", True), ("baseline", "myAgent.v2", False)],
                         ["0", "5"]).value
    candidate, baseline = text.splitlines()
    assert "/assets/retail/delta?view=partitions&partition=myAgent.v3)" in candidate
    assert "partition=myAgent.v3%7C5" in candidate and "myAgent.v2" not in candidate
    assert "partition=myAgent.v2%7C0" in baseline and "myAgent.v3" not in baseline
    assert "delta?" not in baseline  # a first version has no delta page to link


def test_wide_tables_are_split_so_the_decisive_columns_show():
    fit = pd.DataFrame([dict.fromkeys(FIT_COLUMNS, 1) | {"tool": "bookRoom"}], columns=list(FIT_COLUMNS))
    tables = world_fit_tables(fit)
    columns = {name: [c.name for c in t.schema.columns] for name, t in tables.items()}
    assert all(cols[0] == "tool" and len(cols) <= MAX_UI_COLUMNS for cols in columns.values()), columns
    shown = [c for cols in columns.values() for c in cols[1:]]
    assert sorted(shown) == sorted(FIT_COLUMNS[1:])  # every column once, none lost
    assert {"told_rejected", "told_not_found", "write_tried", "write_applied", "unsupplied"} <= set(columns["world_fit"])
    assert "invalid_argument" in columns["world_fit_arguments"]
    check = checks.world_fit_result(fit)
    assert all(len(v.schema.columns) <= MAX_UI_COLUMNS for v in check.metadata.values()
               if isinstance(v, dg.TableMetadataValue))
    # The delta's and the hack scan's verdict columns come before anything a reader can do without.
    assert {"verdict", "before", "after", "delta", "p_value", "n_tasks"} <= set(DELTA_UI_COLUMNS[:MAX_UI_COLUMNS - 1])
    assert HACK_SCAN_UI_COLUMNS[:2] == ("feature", "flagged") and len(HACK_SCAN_UI_COLUMNS) <= MAX_UI_COLUMNS
    with pytest.raises(KeyError, match="write_applied"):
        split_tables(fit.drop(columns=["write_applied"]), "tool", checks.FIT_UI_GROUPS)


def test_numbers_in_json_metadata_are_rounded():
    weights = {"structured": 0.1 + 0.2, "novelty": 1 / 3, "counts": [2, 0.30000000000000004]}
    assert rounded(weights) == {"structured": 0.3, "novelty": 0.3333, "counts": [2, 0.3]}


def _user_texts(defs: dg.Definitions) -> list[tuple[str, str]]:
    texts = []
    for asset in defs.assets:
        texts += [(k.to_user_string(), d) for k, d in asset.descriptions_by_key.items() if d]
        texts += [(f"check {s.name}", s.description) for s in asset.check_specs if s.description]
    repo = defs.get_repository_def()
    texts += [(j.name, j.description) for j in repo.get_all_jobs() if j.description]
    texts += [(s.name, s.description) for s in [*repo.schedule_defs, *repo.sensor_defs] if s.description]
    return texts


def test_no_code_names_in_what_the_ui_says():
    code_name = re.compile(r"defaults\.|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b")  # defaults.X, MAX_ERROR_SHARE
    texts = _user_texts(build_definitions(["retail"]))
    assert len(texts) > 20
    assert [(where, code_name.findall(text)) for where, text in texts if code_name.search(text)] == []
    assert f"at most {defaults.MAX_ERROR_SHARE:.0%}" in checks.ROLLOUT_HEALTH_DESCRIPTION


def test_the_catalog_lists_the_steps_in_order_by_their_tag():
    defs = build_definitions(["retail"])
    steps = {k.path[-1]: (a.tags_by_key[k][STEP_TAG], a.descriptions_by_key[k]) for a in defs.assets for k in a.keys}
    assert all(re.fullmatch(r"\d\d-[a-z]+", tag) for tag, _ in steps.values()), steps
    for step, (tag, description) in steps.items():  # the tag's number is the step the description names
        assert description.startswith(f"Step {tag[:2]}."), (step, tag, description[:20])
    ordered = [s for s, _ in sorted(steps.items(), key=lambda kv: kv[1][0])]
    assert ordered[:4] == ["axes", "covering_array", "world", "situations"] and ordered[-1] == "trained_policy"


def test_rollout_statuses_are_explained_where_they_are_counted():
    rows = pd.DataFrame({"status": ["user_left", "user_left", "ok", "turn_cap"], "arm": "grid",
                         "behavior_signature": ["a", "b", "c", "d"], "model_calls": 3, "cost": 0.0,
                         "oracle_reward": [1.0, 0.0, 1.0, 0.0], "latency_s": 1.0, "error": None})
    meaning = checks.rollout_metadata(rows)["status_meaning"].value
    line = next(line for line in meaning.splitlines() if "user_left" in line)
    assert "(2)" in line and "ended the conversation" in line and "graded" in line
    assert f"{defaults.MAX_TURNS} agent turns" in meaning


def test_a_failed_blocking_check_fails_the_run_with_its_name_and_reason(small_defs, instance):
    assets, resources, _ = small_defs
    run(assets, resources, instance, ["axes"], None)
    run(assets, resources, instance, SEED_STEPS[1:], "0")
    result = run(assets, resources, instance, ["search", "rollouts", "grades"], partition_key("lenient-v2", "0"))
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    message = failure.event_specific_data.error.message
    assert "blocking asset check" not in message
    assert "blocking check judge_trust of retail/grades failed: verdict: untrusted: " in message
    [check] = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"
               and e.event_specific_data.check_name == "judge_trust"]
    reason = check.description.split("verdict: untrusted: ", 1)[1]
    assert reason and reason in message  # the check's own reason, not a placeholder
    assert failure.event_specific_data.user_failure_data.metadata["failed_checks"].value == ["judge_trust"]


def test_the_delta_links_each_version_to_its_own_partitions(small_defs, instance):
    assets, resources, _ = small_defs
    run(assets, resources, instance, ["axes"], None)
    run(assets, resources, instance, SEED_STEPS[1:], "0")
    for version in ("agent-v1", "agent-v2"):
        assert run(assets, resources, instance, ["search", "rollouts", "grades"], partition_key(version, "0")).success
    result = run(assets, resources, instance, ["delta"], "agent-v2")
    assert result.success
    [materialization] = result.asset_materializations_for_node("retail__delta")
    candidate, baseline = materialization.metadata["versions"].value.splitlines()
    assert "**agent-v2**" in candidate and "partition=agent-v2)" in candidate and "partition=agent-v2%7C0" in candidate
    assert "**agent-v1**" in baseline and "partition=agent-v1%7C0" in baseline and "agent-v2" not in baseline
    [check] = [e.event_specific_data for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert check.description  # passed or not, it says which guarded metrics it read


# --- automation: the nightly evaluates both sides of every delta on every seed ---------------------------------------

REGISTRY = {"defaults": {"judge_model": "sim/judge", "user_model": "sim/user"},
            "policies": {"base.v1": {"domain": "retail", "model": "sim/agent-v1"},
                         "side.v1": {"domain": "retail", "model": "sim/agent-v1"},  # in no delta, not newest
                         "cand.v2": {"domain": "retail", "model": "sim/agent-v2", "baseline": "base.v1"},
                         "cand.v3": {"domain": "retail", "model": "sim/agent-v2", "baseline": "cand.v2"},
                         "solo.v9": {"domain": "retail", "model": "sim/agent-v2"}}}  # the newest


@pytest.fixture
def own_registry(tmp_path, monkeypatch):
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump(REGISTRY))
    monkeypatch.setattr(automation, "REGISTRY_PATH", path)
    return path


def _run_with_partition(instance: dg.DagsterInstance, partition: str | dg.MultiPartitionKey,
                        partitions: dg.PartitionsDefinition) -> dg.ExecuteInProcessResult:
    """A finished run carrying a partition tag, as the sensors see a seed or policy run."""
    @dg.asset(partitions_def=partitions)
    def noop() -> None:
        return None
    result = dg.materialize([noop], instance=instance, partition_key=partition)
    assert result.success
    return result


def _sensor_context(sensor, instance, result):
    return dg.build_run_status_sensor_context(sensor_name=sensor.name, dagster_instance=instance,
                                              dagster_run=result.dagster_run,
                                              dagster_event=result.get_run_success_event())


def test_after_a_seed_run_every_version_of_a_delta_runs_on_that_seed(own_registry):
    sensor = automation.seed_ready_sensor("retail")
    with dg.instance_for_test() as instance:
        seeded = _run_with_partition(instance, "3", dg.StaticPartitionsDefinition(["3"]))
        requests = sensor(_sensor_context(sensor, instance, seeded))
    assert [r.partition_key for r in requests] == [partition_key(v, "3")
                                                   for v in ("base.v1", "cand.v2", "cand.v3", "solo.v9")]
    assert len({r.run_key for r in requests}) == 4


def test_a_baseline_run_brings_the_deltas_that_compare_against_it(own_registry):
    sensor = automation.delta_follow_sensor("retail")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("retail_policy_version", list(REGISTRY["policies"]))
        outcomes = {}
        for slug in ("base.v1", "cand.v2", "side.v1"):
            done = _run_with_partition(instance, partition_key(slug, "0"), seed_by_version("retail"))
            outcomes[slug] = sensor(_sensor_context(sensor, instance, done))
    assert [r.partition_key for r in outcomes["base.v1"]] == ["cand.v2"]
    assert [r.partition_key for r in outcomes["cand.v2"]] == ["cand.v2", "cand.v3"]
    assert isinstance(outcomes["side.v1"], dg.SkipReason)


def test_the_local_instance_caps_runs_in_progress(tmp_path):
    shutil.copy(Path(checks.__file__).parent / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:  # reads <dir>/dagster.yaml, as DAGSTER_HOME does
        queue = instance.get_concurrency_config().run_queue_config
    assert queue is not None and queue.max_concurrent_runs == 2
    assert {"key": "dagster/partition", "value": {"applyLimitPerUniqueValue": True}, "limit": 1} in \
        queue.tag_concurrency_limits


def _store(partitions: dict[str, list[str]]):
    instance = dg.DagsterInstance.ephemeral()
    for name, keys in partitions.items():
        instance.add_dynamic_partitions(name, keys)
    return instance
