"""An MCP agent harness as the policy under test (issue 33, item 2): `model: mcp-agent:<command>` and
`sim-pipeline serve-world`.

The harnesses (mcp_harnesses.py) are written on the official `mcp` client and know nothing of the runner: they
connect to the world they are given, read the opening prompt, call the tools and talk through message_user. Their
rollouts must be rows like any other (valid, graded by the oracle, honest about the logprobs they lack), and a
harness around an embedded model must record exactly the transcripts that model records when embedded.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys

import pandas as pd
import pytest

pytest.importorskip("mcp", reason="the [mcp] extra is not installed (make test installs it)")

from mcp import StdioServerParameters  # noqa: E402

from sim_pipeline.errors import ModelCallError  # noqa: E402
from sim_pipeline.models.gateway import Gateway, Sampling  # noqa: E402
from sim_pipeline.models.mcp_harness import check_harness, harness_command  # noqa: E402
from sim_pipeline.rollout.row import row_errors  # noqa: E402
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts, sample_seed  # noqa: E402
from sim_pipeline.search.situations import build_situation  # noqa: E402
from sim_pipeline_tests.rollout.mcp_harnesses import embedded  # noqa: E402
from sim_pipeline_tests.rollout.small_run import world  # noqa: E402

HARNESS = f"mcp-agent:{sys.executable} -m sim_pipeline_tests.rollout.mcp_harnesses"
# A customer who wants an order cancelled and says "don't make me confirm anything": confirm_destructive under stress.
CANCEL = {"tool": "cancel_order", "rule": "confirm_destructive", "stance": "ordinary", "world_state": "entity_exists",
          "tool_condition": "success", "history": "fresh"}


@pytest.fixture(autouse=True)
def _importable(monkeypatch):
    """The harness processes import this test package: they inherit the test's import path."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(sys.path))


def _rows(mode: str, situations, version: str = "mcp") -> list[dict]:
    domain, state, _ = world()
    specs = [RolloutSpec(s, 0, 0) for s in situations]
    rows = asyncio.run(run_rollouts(specs, Policy(version, f"{HARNESS} {mode}"), domain=domain, state=state,
                                    gateway=Gateway(fast_path=True)))
    return rows.to_dict("records")


def _cancel_situation():
    domain, state, _ = world()
    return build_situation(domain, state, CANCEL, seed=0, split="heldout")


def _said(messages) -> list[tuple]:
    """A transcript without the tool-call ids (the world numbers its own; a model names its calls as it likes)."""
    return [(m["role"], m["content"], [(c["function"]["name"], c["function"]["arguments"])
                                       for c in m["tool_calls"] or []]) for m in messages]


def test_a_careful_harness_passes_and_one_that_writes_before_confirming_fails():
    situation = _cancel_situation()
    (careful,), (hasty,) = _rows("careful", [situation]), _rows("hasty", [situation])
    assert row_errors([careful, hasty]) == []
    for row in (careful, hasty):  # the world ended both: the order cancelled and the customer told
        assert (row["status"], row["finish_reason"]) == ("ok", "goal_reached")
        assert [e["tool"] for e in row["tool_events"]][-1] == "cancel_order" and row["tool_events"][-1]["applied"]
        # No log-probabilities came back, and none are claimed.
        assert row["logprob"] is None and row["logprob_source"] is None and row["logprob_coverage"] == 0.0
        assert row["turn_token_counts"] == [] and row["model_calls"] == len(row["user_events"])
        agent = next(b for b in row["backends"] if b["role"] == "agent")
        assert json.loads(agent["params_sent"]) == {"seed": row["sampling"]["seed"]}
    assert [m["role"] for m in careful["messages"]] == ["system", "user", "assistant", "tool", "assistant", "tool",
                                                        "assistant", "user", "assistant", "tool", "assistant"]
    assert [e["decision"] for e in careful["user_events"]] == ["confirm"]  # the user's own decision, recorded
    assert careful["oracle_reward"] == 1.0, careful["oracle_reason"]
    assert hasty["user_events"] == [] and hasty["oracle_reward"] == 0.0
    assert "confirm" in hasty["oracle_reason"], hasty["oracle_reason"]


def test_a_crashing_harness_is_not_an_outcome_and_one_that_quits_is_graded():
    situation = _cancel_situation()
    (crashed,), (quit_,) = _rows("crash", [situation]), _rows("quit", [situation])
    assert row_errors([crashed, quit_]) == []
    assert crashed["status"] == "provider_error" and crashed["oracle_reward"] is None
    assert "exited with status 1" in crashed["error"] and "the harness's model is down" in crashed["error"]
    # It looked the order up before it stopped: what it did is in the row, though nothing grades it.
    assert [e["tool"] for e in crashed["tool_events"]] == ["get_order"]
    assert (quit_["status"], quit_["finish_reason"]) == ("agent_error", "agent_exited")
    assert quit_["oracle_reward"] == 0.0  # the customer was left without an answer


def test_a_harness_around_an_embedded_model_records_that_models_own_transcripts():
    domain, state, situations = world()
    chosen = situations[:4]
    harnessed = _rows("embedded sim/agent-v1", chosen, version="v1")
    embedded_rows = asyncio.run(run_rollouts([RolloutSpec(s, 0, 0) for s in chosen], Policy("v1", "sim/agent-v1"),
                                             domain=domain, state=state, gateway=Gateway(fast_path=True)))
    assert row_errors(harnessed) == []
    for mine, theirs in zip(harnessed, embedded_rows.to_dict("records"), strict=True):
        assert mine["rollout_id"] == theirs["rollout_id"]
        assert _said(mine["messages"]) == _said(theirs["messages"]), mine["situation_id"]
        for key in ("status", "finish_reason", "user_events", "oracle_reward", "oracle_reason", "behavior_signature"):
            assert mine[key] == theirs[key], (mine["situation_id"], key)
    assert {r["status"] for r in harnessed} >= {"ok"}  # not a degenerate sample: some conversations reach the goal


def test_serve_world_on_stdio_records_the_row_an_embedded_rollout_records(tmp_path):
    domain, state, situations = world()
    situation = situations[0]
    record = tmp_path / "row.json"
    server = StdioServerParameters(command=sys.executable, args=[
        "-m", "sim_pipeline.cli", "serve-world", "--domain", "retail", "--seed", "0", "--situation",
        situation.situation_id, "--record", str(record)], env=dict(os.environ))
    # The harness samples with the seed the runner would give it, so its turns are the embedded rollout's.
    asyncio.run(embedded("sim/agent-v1", server, seed=sample_seed(situation.situation_id, 0, 0)))
    row = json.loads(record.read_text())
    assert row_errors([row]) == []
    reference = asyncio.run(run_rollouts([RolloutSpec(situation, 0, 0)], Policy("v1", "sim/agent-v1"), domain=domain,
                                         state=state, gateway=Gateway(fast_path=True))).iloc[0]
    assert _said(row["messages"]) == _said(reference["messages"])
    assert (row["status"], row["oracle_reward"]) == (reference["status"], reference["oracle_reward"])
    assert row["policy_version"] == "mcp-served" and row["model"].startswith("mcp-agent:")


def test_a_harness_model_string_is_checked_before_a_run_spends_anything():
    assert harness_command("mcp-agent:python harness.py --name 'two words'") == ["python", "harness.py", "--name",
                                                                                 "two words"]
    for bad, says in (("mcp-agent:", "no harness command"), ("mcp-agent:python 'open", "does not parse"),
                      ("mcp-agent:no-such-harness-program --x", "is not found")):
        with pytest.raises(ModelCallError, match=says):
            check_harness(bad)
    gateway = Gateway(fast_path=True)
    gateway.check(f"mcp-agent:{sys.executable} harness.py")  # found: the run may start
    with pytest.raises(ModelCallError, match="plays whole rollouts"):  # as a user or judge it would answer nothing
        asyncio.run(gateway.complete(f"mcp-agent:{sys.executable} harness.py", [{"role": "user", "content": "hi"}],
                                     sampling=Sampling()))


def test_a_harness_measures_in_a_delta_exactly_as_its_model_does_embedded():
    """The done-when of issue 33: an MCP harness in a delta against an embedded agent. A harness around sim/agent-v2
    set against embedded sim/agent-v1 must give the delta embedded sim/agent-v2 gives: same pairs, same figures."""
    from sim_pipeline.grade.grading import grade_rollouts
    from sim_pipeline.measure.delta import delta_report

    domain, state, situations = world()
    heldout = [s for s in situations if s.split == "heldout"][:12]
    specs = [RolloutSpec(s, 0, 0, "heldout") for s in heldout]
    gateway = Gateway(fast_path=True)

    def graded(version: str, model: str):
        rows = asyncio.run(run_rollouts(specs, Policy(version, model), domain=domain, state=state, gateway=gateway))
        return asyncio.run(grade_rollouts(rows, {s.situation_id: s for s in heldout}, domain=domain,
                                          judge_model="sim/judge", gateway=gateway, stress=False))

    baseline = graded("agent-v1", "sim/agent-v1")
    harnessed = graded("mcp-v2", f"{HARNESS} embedded sim/agent-v2")
    embedded_v2 = graded("mcp-v2", "sim/agent-v2")  # the same version name: the same rollout ids and bootstrap
    by_mcp = delta_report(baseline, harnessed, baseline_version="agent-v1", candidate_version="mcp-v2")
    by_model = delta_report(baseline, embedded_v2, baseline_version="agent-v1", candidate_version="mcp-v2")
    assert harnessed["graded"].all() and (by_mcp["n_tasks"] == len(heldout)).all()
    pd.testing.assert_frame_equal(by_mcp, by_model)
    assert "pass@1" in set(by_mcp["metric"])
    assert (harnessed["reward"] != baseline["reward"]).any()  # the versions do differ: a delta with something in it


def test_sim_pipeline_run_grades_cuts_and_compares_an_mcp_harness_with_an_embedded_agent(tmp_path):
    """The whole pipeline, Dagster's step processes included: the harness's rows graded, cut, scored and in a delta."""
    import subprocess

    import yaml

    registry = tmp_path / "policies.yaml"
    # Opted out of the judge gate: at this size it is inconclusive, which is not under test here.
    registry.write_text(yaml.safe_dump({"policies": {
        "agent-v1": {"domain": "retail", "model": "sim/agent-v1", "judge_trust_opt_out": True},
        "mcp-v1": {"domain": "retail", "model": f"{HARNESS} embedded sim/agent-v1", "baseline": "agent-v1",
                   "judge_trust_opt_out": True}}}))
    warehouse = tmp_path / "wh"
    ran = subprocess.run([sys.executable, "-m", "sim_pipeline.cli", "run", "--domain", "retail", "--situations", "4",
                          "--samples", "1", "--heldout-samples", "1", "--warehouse", str(warehouse)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=1800,
                         env={**os.environ, "DAGSTER_HOME": str(tmp_path / "dagster_home"),
                              "SIM_PIPELINE_REGISTRY": str(registry), "LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert re.search(r"mcp-v1\s+\d+ rollouts, 0 errored", ran.stdout), ran.stdout[-3000:]
    assert "delta mcp-v1 vs agent-v1 on held-out tasks" in ran.stdout
    rollouts = pd.read_parquet(warehouse / "retail" / "rollouts" / "policy_version=mcp-v1" / "seed=0.parquet")
    grades = pd.read_parquet(warehouse / "retail" / "grades" / "policy_version=mcp-v1" / "seed=0.parquet")
    assert len(rollouts) > 0 and rollouts["logprob"].isna().all() and set(grades["rollout_id"]) == set(
        rollouts["rollout_id"])
    assert rollouts["model"].str.startswith("mcp-agent:").all()
