"""`sim-pipeline backfill` queues one real asset backfill; the backfill daemon's own iteration runs it to the end,
in dependency order (seed steps, then policy partitions, then each delta after its baseline's grades)."""

import logging

import dagster as dg
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.test_utils import create_test_daemon_workspace_context
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.backfill import execute_backfill_iteration

from sim_pipeline import warehouse
from sim_pipeline.defs.backfill import backfill_progress, failure_lines, launch_backfill, plan_backfill
from sim_pipeline.registry import load_registry

# sqlite storage; each run the daemon launches executes there and then, so one thread can follow the whole backfill
SYNCHRONOUS_RUNS = {
    "run_coordinator": {"module": "dagster._core.run_coordinator", "class": "DefaultRunCoordinator"},
    "run_launcher": {"module": "dagster._core.launcher.sync_in_memory_run_launcher", "class": "SyncInMemoryRunLauncher"},
}
ITERATIONS = 40  # each daemon iteration launches the runs whose parents are done; the graph is 5 levels deep


def test_a_backfill_of_two_versions_runs_every_step_under_the_daemon(tmp_path, registry_path, monkeypatch):
    base = tmp_path / "warehouse"
    monkeypatch.setenv("SIM_PIPELINE_TEST_WAREHOUSE", str(base))
    monkeypatch.setenv("SIM_PIPELINE_TEST_REGISTRY", str(registry_path))
    monkeypatch.setenv("SIM_PIPELINE_TEST_CACHE", str(tmp_path / "cache"))
    from sim_pipeline_tests.defs import backfill_location

    registry = load_registry(registry_path)
    versions = [registry["agent-v1"], registry["agent-v2"]]
    plan = plan_backfill("retail", versions, ["0"])
    # axes, 3 seed steps, 9 policy steps x 2 versions, agent-v2's delta (agent-v1 has no baseline)
    assert len(plan.targets) == 1 + 3 + 18 + 1
    target = InProcessWorkspaceLoadTarget(InProcessCodeLocationOrigin(LoadableTargetOrigin(
        module_name="sim_pipeline_tests.defs.backfill_location", attribute="defs")))
    with dg.instance_for_test(overrides=SYNCHRONOUS_RUNS) as instance:
        instance.add_dynamic_partitions("retail_policy_version", ["agent-v1", "agent-v2"])
        backfill_id = launch_backfill(instance, "retail", plan, defs=backfill_location.defs)
        assert [b.backfill_id for b in instance.get_backfills()] == [backfill_id]  # what Overview > Backfills lists
        with create_test_daemon_workspace_context(target, instance) as workspace:
            for _ in range(ITERATIONS):
                list(execute_backfill_iteration(workspace, logging.getLogger("backfill")))
                if backfill_progress(instance, backfill_id).done:
                    break
        progress = backfill_progress(instance, backfill_id)
        assert progress.succeeded, "\n".join([progress.line(), *failure_lines(instance, backfill_id)])
        assert progress.runs_by_status == {"SUCCESS": sum(progress.runs_by_status.values())}
        for slug in ("agent-v1", "agent-v2"):
            assert warehouse.partition_path(base, "retail", "grades", policy_version=slug, seed="0").exists()
        delta = instance.get_latest_materialization_event(dg.AssetKey(["retail", "delta"]))
        assert delta.dagster_event.partition == "agent-v2"
        assert delta.asset_materialization.metadata["seeds"].value == ["0"]  # the baseline's grades were there
        assert warehouse.read_table(warehouse.partition_path(base, "retail", "delta", policy_version="agent-v2")).shape[0]


def test_a_delta_depends_on_its_baselines_grades_in_the_asset_graph(small_defs):
    """So a backfill (or any orchestration reading the graph) never runs a delta before the baseline is graded."""
    from dagster._core.definitions.partitions.context import partition_loading_context

    assets, resources, _ = small_defs
    graph = dg.Definitions(assets=assets, resources=resources).resolve_asset_graph()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("retail_policy_version", ["agent-v1", "agent-v2"])
        with partition_loading_context(dynamic_partitions_store=instance):
            parents = graph.get_parents_partitions(dg.AssetKey(["retail", "delta"]), "agent-v2").parent_partitions
    grades = {p.partition_key for p in parents if p.asset_key == dg.AssetKey(["retail", "grades"])}
    assert {"agent-v1|0", "agent-v2|0", "agent-v1|7"} <= grades


def test_a_failed_backfill_run_is_reported_with_its_step_and_the_users_error():
    """`backfill --wait` and the tests print these lines: the step that failed and the innermost error (the user's
    exception or the blocking check), not Dagster's wrapper; runs that succeeded and other backfills' runs are not
    listed."""
    @dg.asset
    def raises():
        raise ValueError("the model endpoint said 503\nretry later")

    @dg.asset(check_specs=[dg.AssetCheckSpec("judge_trusted", asset="gated", blocking=True)])
    def gated():
        yield dg.Output(1)
        yield dg.AssetCheckResult(check_name="judge_trusted", passed=False)

    @dg.asset
    def fine():
        return 1

    with dg.instance_for_test() as instance:
        runs = {asset.key.path[-1]: dg.materialize([asset], instance=instance, raise_on_error=False,
                                                   tags={"dagster/backfill": "bf1", "dagster/partition": "agent-v2|0"})
                for asset in (raises, gated, fine)}
        dg.materialize([raises], instance=instance, raise_on_error=False, tags={"dagster/backfill": "other"})
        lines = sorted(failure_lines(instance, "bf1"))
    assert lines == sorted([
        f"run {runs['raises'].run_id} (agent-v2|0) failed: raises: ValueError: the model endpoint said 503 retry later",
        f"run {runs['gated'].run_id} (agent-v2|0) failed: gated: DagsterAssetCheckFailedError: 1 blocking asset check "
        "failed with ERROR severity: gated: judge_trusted"])


def test_a_failed_backfill_runs_report_never_shows_a_key(monkeypatch):
    """An endpoint's error may echo the request's key: the report redacts it, as `sim-pipeline run`'s log does."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-value-1234567890")

    @dg.asset
    def echoes():
        raise RuntimeError("401 from the endpoint for key sk-test-secret-value-1234567890")

    with dg.instance_for_test() as instance:
        dg.materialize([echoes], instance=instance, raise_on_error=False, tags={"dagster/backfill": "bf2"})
        [line] = failure_lines(instance, "bf2")
    assert "sk-test-secret-value-1234567890" not in line and line.endswith("echoes: RuntimeError: 401 from the "
                                                                            "endpoint for key [redacted]")
