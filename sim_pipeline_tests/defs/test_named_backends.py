"""A version whose agent is a local endpoint and whose judge is another runs in one materialization (real HTTP)."""

import json

import dagster as dg
import yaml

from sim_pipeline import defaults, warehouse
from sim_pipeline.models.provenance import records
from sim_pipeline.defs.resources import RegistryResource
from sim_pipeline.protocol.statuses import is_error
from sim_pipeline.defs.partitions import partition_key
from sim_pipeline_tests.defs.test_assets import POLICY_STEPS, SEED_STEPS, check_results, materialized, run
from sim_pipeline_tests.scripted_server import ScriptedServer

JUDGE_KEY = "sk-judge-test-key-0042"


def test_an_agent_and_a_judge_on_their_own_endpoints_run_together(small_defs, tmp_path, monkeypatch):
    assets, resources, base = small_defs
    monkeypatch.setenv("JUDGE_API_KEY", JUDGE_KEY)
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)  # every endpoint and key comes from the registry's models
    refusal = {"content": "Apologies, that is outside what this desk can do for you."}
    verdict = {"content": '{"reason": "The agent declined a request it could have handled.", "score": 0}'}
    with ScriptedServer(lambda request: refusal) as agent, ScriptedServer(lambda request: verdict) as judge:
        path = tmp_path / "named.yaml"
        path.write_text(yaml.safe_dump({
            "models": {"local-agent": {"model": "openai/scripted-agent", "api_base": agent.base_url,
                                       "timeout_s": 10},
                       "remote-judge": {"model": "openai/scripted-judge", "api_base": judge.base_url,
                                        "api_key_env": "JUDGE_API_KEY"}},
            "defaults": {"user_model": "sim/user"},
            "policies": {"local-v1": {"domain": "retail", "model": "local-agent", "judge_model": "remote-judge"}}}))
        resources = {**resources, "registry": RegistryResource(path=str(path))}
        instance = dg.DagsterInstance.ephemeral()
        instance.add_dynamic_partitions("retail_policy_version", ["local-v1"])
        run(assets, resources, instance, ["axes"], None)
        run(assets, resources, instance, SEED_STEPS[1:], "0")
        result = run(assets, resources, instance, POLICY_STEPS, partition_key("local-v1", "0"))
        endpoint, judge_host = f"127.0.0.1:{agent.port}", f"127.0.0.1:{judge.port}"
    assert {("retail", "rollouts"), ("retail", "grades")} <= materialized(result)
    assert (("retail", "grades"), "judge_trust") in check_results(result)
    assert agent.requests and all(r["model"] == "scripted-agent" for r in agent.requests)
    assert judge.requests and all(r["model"] == "scripted-judge" for r in judge.requests)
    assert {h["authorization"] for h in judge.headers} == {f"Bearer {JUDGE_KEY}"}
    rollouts = warehouse.read_table(warehouse.partition_path(base, "retail", "rollouts", policy_version="local-v1",
                                                             seed="0"))
    grades = warehouse.read_table(warehouse.partition_path(base, "retail", "grades", policy_version="local-v1",
                                                           seed="0"))
    assert not rollouts["status"].map(is_error).any() and (rollouts["model"] == "local-agent").all()
    assert {s["endpoint"] for s in rollouts["sampling"]} == {endpoint}
    assert grades["judge_version"].str.startswith("remote-judge@").all() and (grades["judge_status"] == "ok").all()
    assert JUDGE_KEY not in rollouts.to_json() + grades.to_json()
    # Every grade row names each role's backend: the agent's and the judge's entries on their hosts, the embedded
    # user with the settings it was sent, and what the judge's calls carried.
    for cell in grades["backends"]:
        roles = {r["role"]: r for r in records(cell)}
        assert set(roles) == {"agent", "user", "writer", "judge"}
        assert (roles["agent"]["entry"], roles["agent"]["model"], roles["agent"]["endpoint"]) == (
            "local-agent", "openai/scripted-agent", endpoint)
        assert (roles["judge"]["entry"], roles["judge"]["model"], roles["judge"]["endpoint"]) == (
            "remote-judge", "openai/scripted-judge", judge_host)
        assert (roles["user"]["entry"], roles["user"]["model"], roles["user"]["endpoint"]) == (None, "sim/user", None)
        assert json.loads(roles["judge"]["params_sent"])["temperature"] == defaults.JUDGE_TEMPERATURE
        assert "logprobs" not in json.loads(roles["judge"]["params_sent"])  # the judge asks for none
        assert len({r["config_sha256"] for r in roles.values()}) == 4
    sent = [json.loads(records(c)[0]["params_sent"]) for c in rollouts["backends"]]
    assert [s["seed"] for s in sent] == [s["seed"] for s in rollouts["sampling"]]  # each row's own request
    assert all(s["logprobs"] is True and s["max_tokens"] == r["max_tokens"] for s, r in zip(sent, rollouts["sampling"]))
    users = [json.loads(records(c)[1]["params_sent"]) for c in rollouts["backends"]]
    assert all(u == {"seed": r["seed"], "temperature": 1.0} for u, r in zip(users, rollouts["sampling"]))


def test_a_reply_classifier_reads_the_agents_replies_in_a_materialization(small_defs, tmp_path, monkeypatch):
    """The registry's reply_classifier on its own endpoint: asked about the agent's replies while the rollouts and
    the grades are made, recorded in each rollout's sampling, and its reading is what the labels rest on."""
    from sim_pipeline.models.reply_reader import FIELDS

    assets, resources, base = small_defs
    for name in ("OPENAI_API_BASE", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    claims = {"content": '{"asks_confirmation": false, "claims_success": true, "refuses": false, '
                        '"asks_for_information": false, "says_cannot": false, "claims_handoff": false}'}
    assert set(FIELDS) == {"asks_confirmation", "claims_success", "refuses", "asks_for_information", "says_cannot",
                           "claims_handoff"}
    with ScriptedServer(lambda request: claims) as reader:
        path = tmp_path / "reader.yaml"
        path.write_text(yaml.safe_dump({
            "models": {"reader": {"model": "openai/scripted-reader", "api_base": reader.base_url}},
            "policies": {"read-v1": {"domain": "retail", "model": "sim/agent-v2", "reply_classifier": "reader"}}}))
        resources = {**resources, "registry": RegistryResource(path=str(path))}
        instance = dg.DagsterInstance.ephemeral()
        instance.add_dynamic_partitions("retail_policy_version", ["read-v1"])
        run(assets, resources, instance, ["axes"], None)
        run(assets, resources, instance, SEED_STEPS[1:], "0")
        run(assets, resources, instance, POLICY_STEPS, partition_key("read-v1", "0"))
        asked = reader.requests
    rollouts = warehouse.read_table(warehouse.partition_path(base, "retail", "rollouts", policy_version="read-v1",
                                                             seed="0"))
    grades = warehouse.read_table(warehouse.partition_path(base, "retail", "grades", policy_version="read-v1",
                                                           seed="0"))
    assert asked and all(r["response_format"]["type"] == "json_schema" for r in asked)
    assert {s["reply_classifier"] for s in rollouts["sampling"]} == {"reader"}
    # Every reply reads as a success claim: no rollout passes the oracle by declining, and a conversation that
    # changed nothing breaks claimed_action_without_call.
    assert not rollouts["oracle_reason"].str.startswith("declined").any()
    nothing = grades[rollouts.set_index("rollout_id").loc[grades["rollout_id"], "tool_events"]
                     .map(lambda e: not any(x["applied"] for x in e)).to_numpy()]
    assert (nothing["conduct_rule"].notna()).all()
