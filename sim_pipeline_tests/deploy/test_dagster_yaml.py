"""deploy/dagster.yaml, loaded as production loads it: PostgreSQL storage from DAGSTER_PG_* variables, the
provider-limited run queue, run monitoring and run retries; a small partition materialized on it is recorded in
PostgreSQL (runs, materializations, check results), and the database password is written nowhere."""

import dagster as dg
import pytest
import yaml
from dagster._serdes import serialize_value

from sim_pipeline.defs.provider_queue import ProviderQueuedRunCoordinator
from sim_pipeline import warehouse
from sim_pipeline.defs.partitions import POLICY_STEPS, partition_key
from sim_pipeline_tests.deploy.locations import DOMAIN, REGISTRY, small_definitions
from sim_pipeline_tests.deploy.services import (
    PG_PASSWORD_SENTINEL,
    PRODUCTION_INSTANCE,
    production_home,
    query,
    require_modules,
)

RUNS = (("axes_job", None), ("seed_job", "0"), ("policy_job", partition_key("agent-v1", "0")))
ROLLOUT_CHECKS = {"row_schema", "rollout_health", "world_fit"}


def test_every_setting_comes_from_the_file_and_the_database_from_the_environment(production_instance):
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

    instance = production_instance
    settings = yaml.safe_load(PRODUCTION_INSTANCE.read_text())
    assert isinstance(instance.run_storage, PostgresRunStorage)
    assert isinstance(instance.event_log_storage, PostgresEventLogStorage)
    assert isinstance(instance.schedule_storage, PostgresScheduleStorage)
    assert isinstance(instance.run_coordinator, ProviderQueuedRunCoordinator)
    assert instance.run_monitoring_enabled and instance.run_monitoring_max_resume_run_attempts == 0
    assert instance.run_retries_enabled and instance.run_retries_max_retries == settings["run_retries"]["max_retries"]
    assert not instance.run_retries_retry_on_asset_or_op_failure  # only a crashed worker is retried
    queue = instance.get_concurrency_config().run_queue_config
    assert queue.max_concurrent_runs == settings["concurrency"]["runs"]["max_concurrent_runs"]
    limits = {limit["key"]: limit["limit"] for limit in queue.tag_concurrency_limits}
    assert limits == {limit["key"]: limit["limit"] for limit in settings["concurrency"]["runs"]["tag_concurrency_limits"]}
    assert limits["sim_pipeline/provider.openai"] >= 1 and limits["sim_pipeline/remote_models"] >= 1


@pytest.mark.parametrize("variable", ["DAGSTER_PG_HOST", "DAGSTER_PG_DB"])
def test_a_missing_variable_stops_the_instance_naming_it(tmp_path, monkeypatch, variable):
    require_modules("dagster_postgres")
    for name, value in production_home(tmp_path / "home", "never_created").items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(variable)
    with pytest.raises(Exception, match=variable):  # noqa: B017 -- Dagster's config error; the name is what matters
        dg.DagsterInstance.from_config(str(tmp_path / "home"))


def test_a_small_partition_is_recorded_in_postgres_runs_materializations_and_checks(
        production_instance, postgres_home, registry_path, tmp_path):
    instance, (_, database) = production_instance, postgres_home
    instance.add_dynamic_partitions(f"{DOMAIN}_policy_version", list(REGISTRY["policies"]))
    defs = small_definitions(str(tmp_path / "warehouse"), str(registry_path), str(tmp_path / "cache"))
    run_ids = []
    for job, partition in RUNS:
        result = defs.resolve_job_def(f"{DOMAIN}_{job}").execute_in_process(
            instance=instance, partition_key=partition, raise_on_error=False)
        assert result.success, job
        run_ids.append(result.run_id)
    policy_run = run_ids[-1]

    # Through Dagster's API: the rollouts' materialization, whose recorded hash is the file's.
    [record] = instance.fetch_materializations(dg.AssetRecordsFilter(
        asset_key=dg.AssetKey([DOMAIN, "rollouts"]), asset_partitions=["agent-v1|0"]), limit=5).records
    path = warehouse.partition_path(tmp_path / "warehouse", DOMAIN, "rollouts", policy_version="agent-v1", seed="0")
    assert record.run_id == policy_run
    assert record.asset_materialization.metadata["content_sha256"].value == warehouse.recorded_sha256(path)

    # Straight from PostgreSQL's tables: the runs, every step's materialization, the check results.
    assert dict(query(database, "SELECT run_id, status FROM runs")) == {run_id: "SUCCESS" for run_id in run_ids}
    events = dict(query(database, "SELECT dagster_event_type, count(*) FROM event_logs WHERE run_id = %s "
                                  "GROUP BY dagster_event_type", (policy_run,)))
    assert events["ASSET_MATERIALIZATION"] == len(POLICY_STEPS)
    checks = query(database, "SELECT check_name, execution_status FROM asset_check_executions WHERE run_id = %s",
                   (policy_run,))
    assert ROLLOUT_CHECKS <= {name for name, _ in checks}
    assert {status for _, status in checks} == {"SUCCEEDED"}
    assert events["ASSET_CHECK_EVALUATION"] == len(checks)

    # The password reaches PostgreSQL and nothing else: not the event log, not the runs, not the instance
    # reference a Celery step message carries.
    pattern = f"%{PG_PASSWORD_SENTINEL}%"
    assert query(database, "SELECT count(*) FROM event_logs WHERE event LIKE %s", (pattern,)) == [(0,)]
    assert query(database, "SELECT count(*) FROM runs WHERE run_body LIKE %s", (pattern,)) == [(0,)]
    assert PG_PASSWORD_SENTINEL not in serialize_value(instance.get_ref())
