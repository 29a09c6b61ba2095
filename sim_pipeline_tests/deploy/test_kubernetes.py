"""The Kubernetes mapping of the production profile (deploy/helm-values.yaml, deploy/definitions_k8s.py): no cluster
runs here, so these tests keep the example honest instead: the code location it serves loads with one Kubernetes Job
per step, the run coordinator it names loads with its config, and its queue limits, run monitoring and run retries
are deploy/dagster.yaml's."""

from pathlib import Path

import yaml
from dagster._config import process_config

from sim_pipeline.defs.provider_queue import ProviderQueuedRunCoordinator
from sim_pipeline_tests.deploy.services import PRODUCTION_INSTANCE, REPO, require_modules

HELM_VALUES = REPO / "deploy" / "helm-values.yaml"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _values() -> dict:
    return yaml.safe_load(HELM_VALUES.read_text())


def test_the_helm_values_serve_the_kubernetes_code_location_with_a_job_per_step():
    require_modules("dagster_k8s")
    import deploy.definitions_k8s as location

    [deployment] = _values()["dagster-user-deployments"]["deployments"]
    args = deployment["dagsterApiGrpcArgs"]
    assert args[args.index("--module-name") + 1] == location.__name__ and args[args.index("--attribute") + 1] == "defs"
    jobs = location.defs.resolve_all_job_defs()
    assert jobs and {job.executor_def.name for job in jobs} == {"k8s"}
    assert _values()["runLauncher"]["type"] == "K8sRunLauncher"


def test_the_helm_values_run_queue_and_monitoring_are_the_production_instances():
    values, instance = _values(), yaml.safe_load(Path(PRODUCTION_INSTANCE).read_text())
    coordinator = values["dagsterDaemon"]["runCoordinator"]
    assert coordinator["type"] == "CustomRunCoordinator"
    custom = coordinator["config"]["customRunCoordinator"]
    assert (custom["module"], custom["class"]) == (instance["run_coordinator"]["module"],
                                                   instance["run_coordinator"]["class"])
    # The coordinator accepts the config as the daemon would build it (the chart passes it through).
    checked = process_config(ProviderQueuedRunCoordinator.config_type(), custom["config"])
    assert checked.success, checked.errors
    config = custom["config"]
    assert config["max_concurrent_runs"] == instance["concurrency"]["runs"]["max_concurrent_runs"]
    assert config["tag_concurrency_limits"] == instance["concurrency"]["runs"]["tag_concurrency_limits"]
    assert {k: v for k, v in config.items() if k in instance["run_coordinator"]["config"]} == \
        instance["run_coordinator"]["config"]
    for section in ("run_monitoring", "run_retries"):
        assert values["dagsterDaemon"][_camel(section)] == {_camel(k): v for k, v in instance[section].items()}
    assert values["telemetry"] == instance["telemetry"]


def test_the_helm_values_hold_no_secret():
    values = _values()
    assert values["generatePostgresqlPasswordSecret"] is False and values["postgresql"]["enabled"] is False
    text = HELM_VALUES.read_text().lower()
    for word in ("password:", "api_key:", "apikey:", "sk-"):
        assert word not in text
