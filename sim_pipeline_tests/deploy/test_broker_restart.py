"""Faults of the production profile (issue 29): the broker, RabbitMQ, stops mid-step and comes back 10 s later.

What holds: the run succeeds, the step runs once, and the Parquet is the in-process run's, byte for byte. Why:
- The step itself needs no broker: its worker's pool process writes events to PostgreSQL and its result to Redis,
  so it finishes during the outage. Its acknowledgement cannot be sent (the connection is gone), so RabbitMQ keeps
  the message (a durable queue, a persistent message) and delivers it again once it is back.
- deploy/celery.yaml sets `worker_deduplicate_successful_tasks`: a worker given a redelivered message whose task
  already succeeded in the result backend acknowledges it without running the step again.
- The orchestrator publishes the next steps while the broker is down; `task_publish_retry_policy` retries for
  about a minute (Celery's default gives up after 0.4 s and fails the run), and the workers reconnect by
  themselves (Celery retries the broker connection).
Without the two settings the run fails when it publishes the next step, and a step redelivered after a restart
runs a second time (both seen here). An outage longer than the publish budget fails the run (its orchestrator
cannot hand out the next step); "Re-execute from failure" then finishes it (not tested: it takes a minute more).

The node is a private one (its own name, data directory and loopback ports), so stopping it touches nothing else.
"""

import json
import os
import subprocess
import sys
import time
from collections import Counter

import dagster as dg
import pytest

from sim_pipeline_tests.deploy.locations import DOMAIN, REGISTRY
from sim_pipeline_tests.deploy.services import REPO, private_rabbitmq
from sim_pipeline_tests.deploy.test_definitions_celery import (  # noqa: F401 -- celery_environment is a fixture
    JOBS,
    WORKERS,
    celery_environment,
    in_process_digests,
    parquet_digests,
    script,
)

TOTAL_TIMEOUT_S = 300  # the three small runs take about 25 s through two workers; the outage adds about 20 s
POLL_S = 0.05  # how often the test reads the event log while it waits for the step to start
TARGET_STEP = f"{DOMAIN}_search_and_rollouts"  # the policy run's first and longest step (2 to 5 s in a worker here)
POLICY_JOB = f"{DOMAIN}_policy_job"
# Longer than the target step, so it ends while the broker is down and the next steps are published during the
# outage; well inside the publish retry budget (about a minute).
OUTAGE_S = 10.0
RUN = [sys.executable, "-m", "sim_pipeline_tests.deploy.celery_run"]
DEDUPLICATED = "Task already completed successfully"  # what a worker logs when it acknowledges a step already done


@pytest.fixture
def private_broker():
    """A RabbitMQ node of the test's own: the test stops and starts it."""
    with private_rabbitmq() as server:
        yield server


@pytest.fixture
def celery_broker(private_broker) -> str:
    """The private node as the broker of celery_environment (overrides the fixture of conftest.py)."""
    return private_broker.url


def _step_events(instance: dg.DagsterInstance, run_id: str, event_type: dg.DagsterEventType) -> Counter:
    return Counter(e.dagster_event.step_key for e in instance.all_logs(run_id, of_type=event_type))


def test_a_broker_outage_mid_step_is_waited_out_and_the_step_runs_once(
        private_broker, celery_environment, production_instance, registry_path, tmp_path):  # noqa: F811
    deadline = time.monotonic() + TOTAL_TIMEOUT_S
    worker_dir, instance = celery_environment, production_instance
    instance.add_dynamic_partitions(f"{DOMAIN}_policy_version", list(REGISTRY["policies"]))
    script("scale-up.sh", str(WORKERS))
    done = subprocess.run([*RUN, *JOBS[:-1]], cwd=REPO, env=os.environ.copy(), capture_output=True, text=True,
                          timeout=deadline - time.monotonic())
    assert done.returncode == 0, done.stderr[-4000:]

    orchestrator = subprocess.Popen([*RUN, JOBS[-1]], cwd=REPO, env=os.environ.copy(), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
    try:
        while True:
            assert time.monotonic() < deadline and orchestrator.poll() is None, "the target step never started"
            runs = instance.get_runs(filters=dg.RunsFilter(job_name=POLICY_JOB))
            if runs and _step_events(instance, runs[0].run_id, dg.DagsterEventType.STEP_START)[TARGET_STEP]:
                break
            time.sleep(POLL_S)
        run_id = runs[0].run_id
        private_broker.stop()
        try:
            time.sleep(OUTAGE_S)
            # The step ended while the broker was down: it needs only PostgreSQL and Redis.
            assert _step_events(instance, run_id, dg.DagsterEventType.STEP_SUCCESS)[TARGET_STEP] == 1
        finally:
            private_broker.start()
        stdout, stderr = orchestrator.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if orchestrator.poll() is None:
            orchestrator.kill()
            orchestrator.wait()
    assert orchestrator.returncode == 0, stderr[-4000:]
    [result] = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert result["success"] and result["run_id"] == run_id
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.SUCCESS

    # A worker is given the target step's message again once it has reconnected (Celery waits up to 8 s between
    # tries), which on a loaded machine comes after the run has ended: wait for it, then count the steps.
    logs = ""
    while DEDUPLICATED not in logs and time.monotonic() < deadline:
        time.sleep(POLL_S)
        logs = "".join(log.read_text() for log in worker_dir.glob("w*.log"))
    assert DEDUPLICATED in logs, logs[-4000:]
    # Every step started and succeeded once: the redelivered message of the target step was recognised as done.
    starts = _step_events(instance, run_id, dg.DagsterEventType.STEP_START)
    assert len(starts) >= 8 and set(starts.values()) == {1}, starts
    assert _step_events(instance, run_id, dg.DagsterEventType.STEP_SUCCESS) == starts
    assert not instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_FAILURE)
    materialized = Counter((tuple(e.dagster_event.asset_key.path), e.dagster_event.partition)
                           for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION))
    assert materialized and set(materialized.values()) == {1}, materialized

    distributed = parquet_digests(tmp_path / "warehouse")
    assert f"{DOMAIN}/rollouts/policy_version=agent-v1/seed=0.parquet" in distributed
    assert distributed == in_process_digests(tmp_path, registry_path)
    assert time.monotonic() < deadline
