"""Faults of the production profile (issue 18): PostgreSQL, which holds the runs and the event log, goes away
while a Celery worker is in the middle of a step.

What holds, measured here: dagster-postgres opens a connection per write and retries a failed one 5 times with
exponential backoff (0.2 s base: about 11.4 s in all, +-1 s of jitter; dagster_postgres.utils.retry_pg_connection_fn).
- A restart (fast shutdown and start, well under a second down) is absorbed: the run succeeds and writes the bytes
  an in-process run writes.
- An outage longer than that budget fails the step that was writing (DagsterPostgresException: too many retries).
  The worker hands the error to the orchestrator through Celery's result backend (Redis), and the orchestrator's
  own writes, retried until the server is back, fail the run cleanly (status FAILURE, steps downstream not
  executed, never stuck STARTED). Whether the step's own STEP_FAILURE event lands depends on when the worker's
  last retry falls; either way the step has no success, so a re-execution from failure runs it again, and the
  rest once each, and writes the same bytes.
  An outage longer than two budgets (about 21 s) can leave the run STARTED: nothing can record its end while the
  database is down, and run monitoring marks it failed only at max_runtime_seconds (deploy/dagster.yaml).

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
# Longer than one retry budget (<= 12.4 s after the step's first failed write, which comes within ~1.5 s of the
# stop), shorter than two (>= 20.8 s): the step fails, and its failure is recorded once the server is back.
OUTAGE_S = 16.0
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


def test_a_postgres_restart_is_absorbed_and_an_outage_fails_the_run_cleanly_and_reexecutes_to_the_same_bytes(
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

    # 1. A restart while the target step runs in a worker: absorbed by the connection retries.
    orchestrator = _policy_run_in_background()
    restarted_run = _wait_for_target_step(instance, orchestrator, set(), deadline)
    private_server.restart()
    returncode, result, stderr = _finish(orchestrator, deadline)
    assert returncode == 0 and result["success"] and result["run_id"] == restarted_run, stderr[-4000:]
    assert instance.get_run_by_id(restarted_run).status == dg.DagsterRunStatus.SUCCESS
    assert set(_materialized(instance, restarted_run).values()) == {1}
    assert parquet_digests(tmp_path / "warehouse") == reference

    # 2. An outage longer than the retry budget, again mid-step: the run fails, and says why.
    orchestrator = _policy_run_in_background()
    failed_run = _wait_for_target_step(instance, orchestrator, {restarted_run}, deadline)
    private_server.stop()
    stopped = time.monotonic()
    try:
        time.sleep(OUTAGE_S)
        assert orchestrator.poll() is None  # the step is still retrying its write
    finally:
        private_server.start()
    returncode, result, stderr = _finish(orchestrator, deadline)
    assert time.monotonic() - stopped < OUTAGE_S + 30
    assert returncode == 1 and not result["success"] and result["run_id"] == failed_run
    assert "too many retries for DB connection" in stderr
    assert instance.get_run_by_id(failed_run).status == dg.DagsterRunStatus.FAILURE
    failures = {e.dagster_event.step_key for e in instance.all_logs(failed_run, of_type=dg.DagsterEventType.STEP_FAILURE)}
    assert failures <= {TARGET_STEP}  # recorded when a retry of the worker's landed after the restart
    assert not instance.all_logs(failed_run, of_type=dg.DagsterEventType.STEP_SUCCESS)

    # The re-execution from failure runs the failed step and everything after it, once each.
    reexecution = subprocess.run([*RUN, "--from-failure", failed_run, POLICY_JOB], cwd=REPO, env=os.environ.copy(),
                                 capture_output=True, text=True, timeout=max(1.0, deadline - time.monotonic()))
    assert reexecution.returncode == 0, reexecution.stderr[-4000:]
    [rerun] = [json.loads(line) for line in reexecution.stdout.splitlines() if line.startswith("{")]
    assert rerun["success"] and instance.get_run_by_id(rerun["run_id"]).parent_run_id == failed_run
    assert _materialized(instance, rerun["run_id"]) == _materialized(instance, restarted_run)
    successes = Counter(e.dagster_event.step_key
                        for e in instance.all_logs(rerun["run_id"], of_type=dg.DagsterEventType.STEP_SUCCESS))
    assert TARGET_STEP in successes and set(successes.values()) == {1}
    assert parquet_digests(tmp_path / "warehouse") == reference
    instance.dispose()
