"""The Celery executor (deploy/definitions_celery.py) on RabbitMQ (broker) and Redis (result backend), on the production
instance (PostgreSQL): two workers started by deploy/scale-up.sh run a policy partition's steps in their own
processes, the Parquet written is byte for byte that of the same partition run in one process, and
deploy/scale-down.sh stops the workers it is asked to."""

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest
import yaml

from sim_pipeline.defs import provider_queue
from sim_pipeline.defs.partitions import partition_key
from sim_pipeline_tests.deploy.locations import (
    CACHE_VARIABLE,
    DOMAIN,
    REGISTRY,
    REGISTRY_VARIABLE,
    WAREHOUSE_VARIABLE,
    small_definitions,
)
from sim_pipeline_tests.deploy.services import (
    CELERY_BACKEND,
    CELERY_BROKER,
    CONNECT_TIMEOUT_S,
    PG_PASSWORD_SENTINEL,
    PRODUCTION_CELERY,
    REDIS,
    REPO,
    require,
    require_modules,
)

WORKERS = 2
RUN_TIMEOUT_S = 300  # the three small runs take about 25 s on two cores; a step no worker takes fails here instead
SCRIPT_TIMEOUT_S = 120  # scale-up gives each worker 60 s to be ready; scale-down is given STOP_TIMEOUT_S below
STOP_TIMEOUT_S = 30  # the workers are idle when stopped: a warm shutdown takes a second or two
TEST_RESULT_EXPIRES_S = 600  # the test's task results leave Redis ten minutes after the test
# Two seeds whose small runs have enough gold labels for a trusted judge on both versions (seed 1's agent-v2 run at
# these sizes is judged untrusted, which blocks its cuts and the delta, as it should).
BACKFILL_SEEDS = ["0", "2"]
BACKFILL_TIMEOUT_S = 480  # the backfill's eleven runs take about two minutes on two cores
DAEMON_POLL_S = 1.0  # between iterations of the backfill and queue daemons, as a daemon's loop would wait
# axes, the seed's plan, world and situations, then one (version, seed) partition: each a run through Celery.
JOBS = [f"{DOMAIN}_axes_job", f"{DOMAIN}_seed_job:0", f"{DOMAIN}_policy_job:{partition_key('agent-v1', '0')}"]


def script(name: str, *args: str) -> subprocess.CompletedProcess:
    """Run deploy/<name> with the test's environment; its output is in the assertion message when it fails."""
    done = subprocess.run([str(REPO / "deploy" / name), *args], env=os.environ.copy(), capture_output=True,
                          text=True, timeout=SCRIPT_TIMEOUT_S)
    assert done.returncode == 0, f"{name} {' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done


def _stat(pid: int) -> list[str] | None:
    """The fields after "pid (name)" in /proc/<pid>/stat (state, parent, ...), or None for no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def parent_of(pid: int) -> int:
    """The parent process of a live process."""
    return int(_stat(pid)[1])


def running(pid: int) -> bool:
    """Whether the process runs: a zombie (exited, not yet reaped by an init that never reaps) does not."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def parquet_digests(base: Path) -> dict[str, str]:
    """sha256 of every Parquet file under a warehouse, by path relative to it."""
    return {str(p.relative_to(base)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(base.rglob("*.parquet"))}


def _stop_workers(worker_dir: Path) -> None:
    """scale-down.sh; should it fail, the workers its pid files name are killed by their pids."""
    try:
        script("scale-down.sh")
    finally:
        for pidfile in worker_dir.glob("w*.pid"):
            pid = int(pidfile.read_text().strip() or 0)
            if pid and running(pid) and "celery" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace"):
                os.kill(pid, signal.SIGKILL)


def _forget_queue(queue: str, broker: str = CELERY_BROKER) -> None:
    """Delete the test's queue and its exchange (Celery names the default exchange after the queue) from RabbitMQ:
    both are durable, so they would outlive the test."""
    from kombu import Connection

    with Connection(broker, connect_timeout=CONNECT_TIMEOUT_S) as connection:
        channel = connection.channel()
        channel.queue_delete(queue)
        channel.exchange_delete(queue)


@pytest.fixture
def celery_environment(celery_broker, postgres_home, registry_path, tmp_path, monkeypatch):
    """The environment of the test, its orchestrator and its workers: the broker (the `celery_broker` fixture) and
    backend URLs, a queue of the test's own (so no other worker on this machine takes its steps), a Celery config
    that is deploy/celery.yaml but for that queue, the worker directory, and the small location's warehouse,
    registry and cache. Stops the workers afterwards."""
    require_modules("dagster_celery", "redis")
    require("Redis", REDIS)
    queue = f"sim-pipeline-test-{uuid.uuid4().hex[:12]}"
    config = yaml.safe_load(PRODUCTION_CELERY.read_text())
    config["execution"]["config"]["config_source"].update(task_default_queue=queue,
                                                           result_expires=TEST_RESULT_EXPIRES_S)
    (tmp_path / "celery.yaml").write_text(yaml.safe_dump(config))
    worker_dir = tmp_path / "workers"
    for name, value in {"SIM_PIPELINE_CELERY_BROKER": celery_broker, "SIM_PIPELINE_CELERY_BACKEND": CELERY_BACKEND,
                        "SIM_PIPELINE_CELERY_CONFIG": str(tmp_path / "celery.yaml"), "SIM_PIPELINE_CELERY_QUEUE": queue,
                        "SIM_PIPELINE_WORKER_DIR": str(worker_dir), "SIM_PIPELINE_WORKER_STOP_TIMEOUT": str(STOP_TIMEOUT_S),
                        WAREHOUSE_VARIABLE: str(tmp_path / "warehouse"), REGISTRY_VARIABLE: str(registry_path),
                        CACHE_VARIABLE: str(tmp_path / "cache"), provider_queue.REGISTRY_VARIABLE: str(registry_path),
                        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}.items():
        monkeypatch.setenv(name, value)
    try:
        yield worker_dir
    finally:
        try:
            _stop_workers(worker_dir)
        finally:
            _forget_queue(queue, celery_broker)


def in_process_digests(tmp_path: Path, registry_path: Path, jobs: list[str] = JOBS) -> dict[str, str]:
    """The sha256 of every Parquet file the jobs (JOB[:PARTITION], in order) write in one process, from a warehouse
    and model cache of their own."""
    reference = small_definitions(str(tmp_path / "reference"), str(registry_path), str(tmp_path / "reference_cache"),
                                  executor=dg.in_process_executor)
    with dg.instance_for_test() as local:
        local.add_dynamic_partitions(f"{DOMAIN}_policy_version", list(REGISTRY["policies"]))
        for item in jobs:
            job, _, partition = item.partition(":")
            assert reference.resolve_job_def(job).execute_in_process(instance=local, partition_key=partition or None,
                                                                     raise_on_error=False).success, job
    return parquet_digests(tmp_path / "reference")


def test_the_code_location_is_every_domain_on_the_celery_executor_and_never_imports_litellm():
    require_modules("dagster_celery")
    code = ("import sys, json\n"
            "import deploy.definitions_celery as celery_location\n"
            "import sim_pipeline.definitions as plain\n"
            "jobs = {j.name: j.executor_def.name for j in celery_location.defs.resolve_all_job_defs()}\n"
            "print(json.dumps({'jobs': jobs, 'plain': sorted(j.name for j in plain.defs.resolve_all_job_defs()),\n"
            "                  'litellm': 'litellm' in sys.modules}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                          timeout=SCRIPT_TIMEOUT_S, env={**os.environ, "PYTHONPATH": str(REPO)})
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(loaded["jobs"]) == loaded["plain"] and set(loaded["jobs"].values()) == {"celery"}
    assert not loaded["litellm"]  # as for sim_pipeline.definitions: the UI and every worker load it quickly


def test_the_executor_config_is_the_celery_files_and_a_file_without_it_is_refused(tmp_path):
    require_modules("dagster_celery")
    from deploy.definitions_celery import celery_executor_config

    config = celery_executor_config(PRODUCTION_CELERY)
    assert config["broker"] == {"env": "SIM_PIPELINE_CELERY_BROKER"}  # resolved in each process, never stored
    assert config["config_source"]["task_acks_late"] is True
    (tmp_path / "empty.yaml").write_text("execution: {}\n")
    with pytest.raises(dg.DagsterInvalidConfigError, match="execution: config:"):
        celery_executor_config(tmp_path / "empty.yaml")


def test_two_workers_run_a_partitions_steps_and_write_the_bytes_of_an_in_process_run(
        celery_environment, production_instance, registry_path, tmp_path):
    worker_dir, instance = celery_environment, production_instance
    instance.add_dynamic_partitions(f"{DOMAIN}_policy_version", list(REGISTRY["policies"]))
    script("scale-up.sh", str(WORKERS))
    workers = {f"sim-w{i}": int((worker_dir / f"w{i}.pid").read_text()) for i in range(1, WORKERS + 1)}
    assert all(f"{name}@" in (worker_dir / f"w{i}.log").read_text() for i, name in enumerate(workers, start=1))

    done = subprocess.run([sys.executable, "-m", "sim_pipeline_tests.deploy.celery_run", *JOBS], cwd=REPO,
                          env=os.environ.copy(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-4000:]
    runs = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["success"] for r in runs] == [True] * len(JOBS)
    policy_run, orchestrator = runs[-1]["run_id"], runs[-1]["pid"]

    # Every step of the policy run started in a worker's pool process, never in the orchestrator or this test.
    starts = instance.all_logs(policy_run, of_type=dg.DagsterEventType.STEP_START)
    assert len(starts) == len(instance.all_logs(policy_run, of_type=dg.DagsterEventType.STEP_SUCCESS)) >= 8
    step_pids = {entry.dagster_event.pid for entry in starts}
    assert not step_pids & {os.getpid(), orchestrator}
    assert {parent_of(pid) for pid in step_pids} <= set(workers.values())
    # Both workers took steps: the executor's engine events name the worker that ran each one.
    hosts = {entry.dagster_event.engine_event_data.metadata["Celery worker"].value
             for entry in instance.all_logs(policy_run, of_type=dg.DagsterEventType.ENGINE_EVENT)
             if "Celery worker" in entry.dagster_event.engine_event_data.metadata}
    assert {host.split("@")[0] for host in hosts} == set(workers)

    # The same partition in one process, from a warehouse and model cache of its own: the same bytes.
    distributed = parquet_digests(tmp_path / "warehouse")
    assert f"{DOMAIN}/rollouts/policy_version=agent-v1/seed=0.parquet" in distributed
    assert distributed == in_process_digests(tmp_path, registry_path)

    # The database password is in no worker's log.
    assert not any(PG_PASSWORD_SENTINEL in log.read_text() for log in worker_dir.glob("w*.log"))

    # scale-down.sh 1 keeps the first worker and stops the second.
    script("scale-down.sh", "1")
    assert (worker_dir / "w1.pid").exists() and not (worker_dir / "w2.pid").exists()
    assert running(workers["sim-w1"]) and not running(workers["sim-w2"])


def test_a_backfill_goes_through_the_production_queue_and_launcher_to_the_workers(
        celery_environment, production_instance, registry_path, tmp_path):
    """The whole production path: `launch_backfill` queues an asset backfill; the backfill daemon submits its runs
    to the provider queue; the queue daemon launches each with the default run launcher (a process per run, from
    a gRPC code server); each run's steps go to the Celery workers."""
    from dagster._core.test_utils import create_test_daemon_workspace_context
    from dagster._core.workspace.load_target import ModuleTarget
    from dagster._daemon.backfill import execute_backfill_iteration
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

    from sim_pipeline.defs.backfill import backfill_progress, failure_lines, launch_backfill, plan_backfill
    from sim_pipeline.registry import load_registry
    from sim_pipeline_tests.deploy import celery_location

    worker_dir, instance = celery_environment, production_instance
    instance.add_dynamic_partitions(f"{DOMAIN}_policy_version", list(REGISTRY["policies"]))
    script("scale-up.sh", str(WORKERS))
    workers = {int((worker_dir / f"w{i}.pid").read_text()) for i in range(1, WORKERS + 1)}
    registry = load_registry(os.environ[REGISTRY_VARIABLE])
    plan = plan_backfill(DOMAIN, [registry["agent-v1"], registry["agent-v2"]], BACKFILL_SEEDS)
    backfill_id = launch_backfill(instance, DOMAIN, plan, defs=celery_location.defs)
    target = ModuleTarget(module_name="sim_pipeline_tests.deploy.celery_location", attribute="defs",
                          working_directory=str(REPO), location_name="deploy_test")
    deadline = time.monotonic() + BACKFILL_TIMEOUT_S
    with create_test_daemon_workspace_context(target, instance) as workspace:
        queue = QueuedRunCoordinatorDaemon(interval_seconds=DAEMON_POLL_S)
        while not backfill_progress(instance, backfill_id).done and time.monotonic() < deadline:
            list(execute_backfill_iteration(workspace, logging.getLogger("backfill")))
            list(queue.run_iteration(workspace))
            time.sleep(DAEMON_POLL_S)
    progress = backfill_progress(instance, backfill_id)
    assert progress.succeeded, "\n".join([progress.line(), *failure_lines(instance, backfill_id)])

    runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
    assert len(runs) >= 4 and {run.status for run in runs} == {dg.DagsterRunStatus.SUCCESS}
    for run in runs:
        assert instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_ENQUEUED)  # through the queue
        [start] = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_START)
        assert start.dagster_event.pid != os.getpid()  # the run's orchestrator is a process of its own
        step_pids = {e.dagster_event.pid for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_START)}
        assert step_pids and {parent_of(pid) for pid in step_pids} <= workers  # every step in a worker's pool
    delta = instance.get_latest_materialization_event(dg.AssetKey([DOMAIN, "delta"]))
    assert delta.dagster_event.partition == "agent-v2" and delta.run_id in {run.run_id for run in runs}

    # Two versions x two seeds and the delta over both seeds: every file is byte for byte what the same jobs write
    # in one process.
    distributed = parquet_digests(tmp_path / "warehouse")
    assert {f"{DOMAIN}/rollouts/policy_version={v}/seed={s}.parquet" for v in ("agent-v1", "agent-v2")
            for s in BACKFILL_SEEDS} | {f"{DOMAIN}/delta/policy_version=agent-v2.parquet"} <= set(distributed)
    jobs = [f"{DOMAIN}_axes_job", *[f"{DOMAIN}_seed_job:{s}" for s in BACKFILL_SEEDS],
            *[f"{DOMAIN}_policy_job:{partition_key(v, s)}" for v in ("agent-v1", "agent-v2") for s in BACKFILL_SEEDS],
            f"{DOMAIN}_delta_job:agent-v2"]
    assert distributed == in_process_digests(tmp_path, registry_path, jobs)
