"""The runner: errors become rows, results do not depend on concurrency, a killed run resumes to the same rows."""

import asyncio
import os
import signal
import subprocess
import sys
import time

import pandas as pd

from sim_pipeline import warehouse
from sim_pipeline.models.cache import ResponseCache
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.row import rollout_table, row_errors
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline_tests.rollout.small_run import run, world

TIMING = ["latency_s"]


def test_concurrency_does_not_change_the_parquet(tmp_path):
    paths = []
    for concurrency in (1, 32):
        rows = run(Gateway(concurrency=concurrency, fast_path=True))
        path = warehouse.partition_path(tmp_path, "retail", f"rollouts_{concurrency}", policy_version="v", seed=0)
        warehouse.write_table(path, rollout_table(rows))  # the table leaves the wall-clock columns out
        paths.append(path)
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_fast_path_gives_the_same_rows_as_litellm(tmp_path):
    slow = run(Gateway(fast_path=False)).drop(columns=TIMING)
    fast = run(Gateway()).drop(columns=TIMING)
    pd.testing.assert_frame_equal(slow, fast)
    paths = [warehouse.partition_path(tmp_path, "retail", name, policy_version="v", seed=0) for name in ("a", "b")]
    for path, rows in zip(paths, (slow, fast)):
        warehouse.write_table(path, rollout_table(rows))
    assert paths[0].read_bytes() == paths[1].read_bytes()  # the Parquet a run writes, byte for byte


def test_an_embedded_only_run_never_imports_litellm():
    # The gateway a `sim-pipeline run` builds (the resource's), on sim/ models only: litellm costs ~6 CPU-seconds
    # and much of the run's memory to import, so it must load only when an HTTP model is called.
    code = ("import sys; from sim_pipeline.defs.resources import ModelGatewayResource; "
            "from sim_pipeline_tests.rollout.small_run import run; "
            "rows = run(ModelGatewayResource(cache_dir=None).gateway()); "
            "print(len(rows), sorted(m for m in sys.modules if m.split('.')[0] in ('litellm', 'openai')))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    count, imported = out.split(" ", 1)
    assert int(count) > 0 and imported.strip() == "[]"


def test_rows_are_valid_and_errors_are_rows():
    domain, state, situations = world()
    specs = [RolloutSpec(s, 0, 0) for s in situations[:3]]
    broken = Policy("broken", "python:sim_pipeline_tests.models.agents_for_tests:broken")
    rows = asyncio.run(run_rollouts(specs, broken, domain=domain, state=state, gateway=Gateway()))
    assert list(rows["status"]) == ["provider_error"] * 3
    assert rows["error"].str.contains("RuntimeError: boom").all()
    assert rows["oracle_reward"].isna().all()  # not an outcome: no gold label either
    assert row_errors(rows.to_dict("records")) == []
    good = asyncio.run(run_rollouts(specs, Policy("v1", "sim/agent-v1"), domain=domain, state=state,
                                    gateway=Gateway(fast_path=True)))
    assert row_errors(good.to_dict("records")) == []
    assert (good["logprob_source"] == "decision").all() and (good["logprob"] < 0).all()


def test_a_failing_user_model_is_a_user_error_never_an_outcome():
    domain, state, situations = world()
    specs = [RolloutSpec(s, 0, 0) for s in situations[:4]]
    policy = Policy("v1", "sim/agent-v1", user_model="python:sim_pipeline_tests.models.agents_for_tests:broken")
    rows = asyncio.run(run_rollouts(specs, policy, domain=domain, state=state, gateway=Gateway(fast_path=True)))
    # The agent answered in text and the world did not already show the goal met, so the user was asked.
    replied = rows["messages"].map(lambda ms: any(m["role"] == "assistant" and m["content"] for m in ms)) & (
        rows["finish_reason"] != "goal_reached")
    assert replied.any()
    assert (rows.loc[replied, "status"] == "user_error").all()
    assert rows.loc[replied, "error"].str.contains("user model").all()
    assert rows.loc[replied, "oracle_reward"].isna().all()


def test_callable_agent_runs_end_to_end():
    domain, state, situations = world()
    agent = Policy("mine", "python:sim_pipeline_tests.models.agents_for_tests:polite_decliner")
    rows = asyncio.run(run_rollouts([RolloutSpec(situations[0], 0, 0)], agent, domain=domain, state=state,
                                    gateway=Gateway()))
    # A refusal the user accepts ends the conversation: the user leaves, and says so as a decision.
    assert rows["status"].iloc[0] == "user_left" and rows["final_text"].iloc[0].startswith("Sorry")
    assert [e["decision"] for e in rows["user_events"].iloc[0]] == ["leave"]


def test_killed_run_resumes_to_the_same_rows(tmp_path):
    reference = run(Gateway(fast_path=True)).drop(columns=TIMING)
    cache = tmp_path / "cache.sqlite"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    job = subprocess.Popen([sys.executable, "-m", "sim_pipeline_tests.rollout.small_run", str(cache), "4"], env=env)
    deadline = time.time() + 120
    while time.time() < deadline and job.poll() is None:
        if cache.exists() and len(ResponseCache(cache)) >= 150:
            job.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    job.wait()
    assert job.returncode == -signal.SIGKILL, "the job finished before it could be killed; raise the threshold"
    done_before = len(ResponseCache(cache))
    gateway = Gateway(cache_path=cache)
    resumed = run(gateway).drop(columns=TIMING)
    assert gateway.cache_hits >= done_before > 0  # nothing already paid for was called again
    pd.testing.assert_frame_equal(resumed, reference)
