"""Faults of the production profile (issue 18): PostgreSQL, which holds the runs and the event log, restarts or
goes away while a Celery worker is in the middle of a step.

What holds, measured here: dagster-postgres opens a connection per write and retries one that fails to open 5 times
with exponential backoff (0.2 s base: about 11.4 s in all, +-1 s of jitter; dagster_postgres.utils.
retry_pg_connection_fn). A statement already in flight when the server shuts down is not retried ("server closed
the connection unexpectedly").
- A restart, or an outage shorter than the retry budget (8 s here), mid-step: if nothing was in flight, every
  write waits the server out and the run succeeds; if a statement was cut, its step fails, and every later write
  (the step's failure, the orchestrator's) waits the server out, so the run ends FAILURE on the record, never
  stuck STARTED, and a re-execution from failure runs the failed step and the rest once each. Either way the
  Parquet is the in-process run's, byte for byte. Which of the two happens depends on timing; both are asserted.
- An outage longer than the budget can leave a run STARTED: a write gives up while the server is still down, and
  nothing can record the run's end. Run monitoring then fails it at max_runtime_seconds (deploy/dagster.yaml; the
  Kubernetes launcher's health check, within a poll interval). Not tested: it takes the 12 h max runtime.

The server is a private one (initdb in a temporary directory, a free loopback port), so stopping it touches
nothing else on the machine.
"""

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from sim_pipeline_tests.deploy.locations import DOMAIN, REGISTRY
from sim_pipeline_tests.deploy.services import (
    REPO,
    private_postgres,
    production_home,
    require_modules,
)
from sim_pipeline_tests.deploy.test_definitions_celery import (  # noqa: F401 -- celery_environment is a fixture
    JOBS,
    WORKERS,
    celery_environment,
    in_process_digests,
    parquet_digests,
    script,
)

TOTAL_TIMEOUT_S = 300  # two policy runs and a re-execution through two workers, plus a 16 s outage
POLL_S = 0.05
TARGET_STEP = f"{DOMAIN}_search_and_rollouts"  # the policy run's first and longest step (about 1.4 s)
POLICY_JOB = f"{DOMAIN}_policy_job"
# Shorter than the connection retry budget (at least 10.4 s with the jitter): every write that starts while the
# server is down waits it out, so the run's end is always recorded. Longer outages can strand a run (module docstring).
OUTAGE_S = 8.0
RUN = [sys.executable, "-m", "sim_pipeline_tests.deploy.celery_run"]


@pytest.fixture
def private_server():
    """A PostgreSQL server of the test's own: the test stops and restarts it."""
    require_modules("dagster_postgres", "psycopg2")
    with private_postgres() as server:
        yield server


@pytest.fixture
def postgres_home(private_server, tmp_path, monkeypatch) -> Iterator[tuple[Path, str]]:
    """deploy/dagster.yaml in a DAGSTER_HOME, on a database of the private server (overrides the fixture of
    conftest.py that the imported celery_environment uses)."""
    home, database = tmp_path / "dagster_home", private_server.create_database()
    for name, value in production_home(home, database).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DAGSTER_PG_PORT", str(private_server.port))
    yield home, database


def _policy_run_in_background() -> subprocess.Popen:
    return subprocess.Popen([*RUN, JOBS[-1]], cwd=REPO, env=os.environ.copy(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_target_step(instance: dg.DagsterInstance, orchestrator: subprocess.Popen, known: set[str],
                          deadline: float) -> str:
    """The new policy run's id once its target step has started in a worker."""
    while True:
        assert time.monotonic() < deadline and orchestrator.poll() is None, "the target step never started"
        runs = [r for r in instance.get_runs(filters=dg.RunsFilter(job_name=POLICY_JOB)) if r.run_id not in known]
        if runs and [e for e in instance.all_logs(runs[0].run_id, of_type=dg.DagsterEventType.STEP_START)
                     if e.dagster_event.step_key == TARGET_STEP]:
            return runs[0].run_id
        time.sleep(POLL_S)


def _finish(orchestrator: subprocess.Popen, deadline: float) -> tuple[int, dict, str]:
    try:
        stdout, stderr = orchestrator.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if orchestrator.poll() is None:
            orchestrator.kill()
            orchestrator.wait()
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    return orchestrator.returncode, (lines[-1] if lines else {}), stderr


def _materialized(instance: dg.DagsterInstance, run_id: str) -> Counter:
    return Counter((tuple(e.dagster_event.asset_key.path), e.dagster_event.partition)
                   for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION))


def _reexecute_from_failure(instance: dg.DagsterInstance, failed_run: str, deadline: float) -> str:
    """Re-execute a failed policy run from failure; asserts it ran the target step and the rest once each."""
    reexecution = subprocess.run([*RUN, "--from-failure", failed_run, POLICY_JOB], cwd=REPO, env=os.environ.copy(),
                                 capture_output=True, text=True, timeout=max(1.0, deadline - time.monotonic()))
    assert reexecution.returncode == 0, reexecution.stderr[-4000:]
    [rerun] = [json.loads(line) for line in reexecution.stdout.splitlines() if line.startswith("{")]
    assert rerun["success"] and instance.get_run_by_id(rerun["run_id"]).parent_run_id == failed_run
    successes = Counter(e.dagster_event.step_key
                        for e in instance.all_logs(rerun["run_id"], of_type=dg.DagsterEventType.STEP_SUCCESS))
    assert TARGET_STEP in successes and set(successes.values()) == {1}
    return rerun["run_id"]


def _failed_cleanly(instance: dg.DagsterInstance, run_id: str) -> None:
    """The run ended FAILURE (not stuck STARTED), the target step without a success, nothing after it run."""
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
    failures = {e.dagster_event.step_key for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)}
    assert failures <= {TARGET_STEP}  # the step's own failure event lands only if a write got through after the restart
    assert not instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)


def test_a_postgres_restart_or_outage_mid_step_never_strands_a_run_and_ends_in_the_same_bytes(
        private_server, celery_environment, registry_path, tmp_path):  # noqa: F811 -- the imported fixture
    deadline = time.monotonic() + TOTAL_TIMEOUT_S
    instance = dg.DagsterInstance.get()  # deploy/dagster.yaml on the private server
    instance.add_dynamic_partitions(f"{DOMAIN}_policy_version", list(REGISTRY["policies"]))
    script("scale-up.sh", str(WORKERS))
    done = subprocess.run([*RUN, *JOBS[:-1]], cwd=REPO, env=os.environ.copy(), capture_output=True, text=True,
                          timeout=deadline - time.monotonic())
    assert done.returncode == 0, done.stderr[-4000:]
    reference = in_process_digests(tmp_path, registry_path)
    assert f"{DOMAIN}/rollouts/policy_version=agent-v1/seed=0.parquet" in reference

    def outage() -> None:
        private_server.stop()
        try:
            time.sleep(OUTAGE_S)
        finally:
            private_server.start()

    for disruption in (private_server.restart, outage):
        earlier = {r.run_id for r in instance.get_runs(filters=dg.RunsFilter(job_name=POLICY_JOB))}
        orchestrator = _policy_run_in_background()
        run_id = _wait_for_target_step(instance, orchestrator, earlier, deadline)
        disruption()
        returncode, result, stderr = _finish(orchestrator, deadline)
        assert result["run_id"] == run_id
        if returncode == 0:  # nothing was in flight: every write waited the server out
            assert result["success"] and instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.SUCCESS
            assert set(_materialized(instance, run_id).values()) == {1}
        else:  # a statement in flight was cut: its step failed, and the run with it, on the record
            assert "server closed the connection" in stderr or "too many retries" in stderr, stderr[-4000:]
            _failed_cleanly(instance, run_id)
            rerun = _reexecute_from_failure(instance, run_id, deadline)
            assert set(_materialized(instance, rerun).values()) == {1}
        assert parquet_digests(tmp_path / "warehouse") == reference
    instance.dispose()
