"""verifiers plays the sandbox world: its own environment loader, rollout loop, chat harness, MCP tool server and scoring.

Everything verifiers-side is verifiers 0.4's own code: `load_environment` resolves the taskset id
`sim-pipeline-verifiers` to `sim_pipeline_verifiers`, serves its shared tool server as a subprocess (`python -m`),
runs each rollout's chat program (the `null` harness's, on this venv's Python) against verifiers' interception, and
scores the trace with the task's reward. Only the model is scripted: an OpenAI-compatible server replays the embedded
agent's rollouts turn by turn (its words before the last become `message_user` calls, as in TRL's environment), and a
cancellation written here in our own words. Requires the [rlenv] extra in a venv of its own (`make test-rlenv`).
"""

import asyncio
import json
import os

import pytest

if os.environ.get("SIM_PIPELINE_RLENV_TESTS") == "required":  # CI: a missing extra is a failure, never a skip
    import verifiers
else:
    verifiers = pytest.importorskip("verifiers", reason="the [rlenv] extra is not installed: run `make test-rlenv`")

import pandas as pd
import verifiers.v1 as vf
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.dialects.chat import ChatDialect
from verifiers.v1.runtimes import SubprocessConfig

from sim_pipeline.cut.export import export_trl
from sim_pipeline.domain import load_domain
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.grade import conduct
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.protocol.environment_tools import MESSAGE_USER
from sim_pipeline.rollout.environment import environment_class, episode_reward, replayed
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline.world.state import build_state
from sim_pipeline_tests.cut import partition
from sim_pipeline_tests.rollout.test_environment import situations
from sim_pipeline_tests.rollout.test_openenv_env import graded
from sim_pipeline_tests.scripted_server import ScriptedServer, build_completion

DOMAIN = "retail"
KEY_VARIABLE = "SIM_PIPELINE_SCRIPTED_KEY"
MAX_ROWS = 6  # rollouts replayed through verifiers at once: each runs a chat program process


def script(messages: list[dict]) -> tuple[list[dict], list[str]]:
    """A rollout's agent turns as the model's replies (its words before the last go through message_user), and the
    tool results the rollout read, in order."""
    texts = [i for i, m in enumerate(messages) if m["role"] == "assistant" and not m["tool_calls"]]
    replies, results = [], []
    for i, message in enumerate(messages[2:], start=2):
        if message["role"] != "assistant":
            continue
        if message["tool_calls"]:
            calls = [c["function"] for c in message["tool_calls"]]
            replies.append({"content": message["content"], "tool_calls": [
                {"name": c["name"], "arguments": json.loads(c["arguments"])} for c in calls]})
            results += [messages[i + 1 + k]["content"] for k in range(len(calls))]
        elif i != texts[-1]:
            replies.append({"content": None, "tool_calls": [{"name": MESSAGE_USER,
                                                            "arguments": {"message": message["content"]}}]})
            results.append(messages[i + 1]["content"])
        else:
            replies.append({"content": message["content"]})
    return replies, results


def play(situations_and_scripts: list, tmp_path) -> tuple[list, list[dict]]:
    """Run verifiers' environment on the situations, the model answering each rollout from its script (found by the
    rollout's opening user message); returns each task's trace and every model request."""
    path = tmp_path / "grpo.jsonl"
    pd.DataFrame([{"situation": json.dumps(s.to_row()), "phrasing_index": 0} for s, _ in situations_and_scripts]
                 ).to_json(path, orient="records", lines=True)
    by_opening = {s.phrasings[0]: replies for s, replies in situations_and_scripts}
    assert len(by_opening) == len(situations_and_scripts), "two rows open alike: the model could not tell them apart"

    def responder(request: dict):
        opening = next(m["content"] for m in request["messages"] if m["role"] == "user")
        turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
        completion = build_completion(by_opening[opening][turn], request, 0)
        if not request.get("stream"):
            return 200, completion
        events = b"".join(ChatDialect().stream_events(completion)).decode()  # verifiers' interception streams
        return 200, events, {"Content-Type": "text/event-stream"}

    async def run(server: ScriptedServer):
        config = vf.SingleAgentEnvConfig(
            taskset={"id": "sim-pipeline-verifiers", "domain": DOMAIN, "data_files": str(path)},
            agent=vf.AgentConfig(runtime=SubprocessConfig()))
        env = vf.load_environment(config)
        ctx = vf.ModelContext(model="scripted-agent",
                              client=EvalClientConfig(base_url=server.base_url, api_key_var=KEY_VARIABLE))
        async with env.serving():
            episodes = await asyncio.gather(*(env.run_episode(task, ctx) for task in env.taskset))
        assert all(e.ok and not e.errors for e in episodes), [e.errors or e.traces[0].errors for e in episodes]
        return [e.traces[0] for e in episodes]

    os.environ.setdefault(KEY_VARIABLE, "sk-test")
    with ScriptedServer(responder) as server:
        traces = asyncio.run(run(server))
        assert not server.errors, server.errors
        return traces, server.requests


def cancellation_script(situation) -> list[dict]:
    """A cancellation in our own words that skips the user's confirmation: verify, cancel, close."""
    facts = situation.facts
    verify = {"name": "verify_customer", "arguments": {"email": facts["email"], "order_id": facts["order_id"]}}
    cancel = {"name": "cancel_order", "arguments": {"order_id": facts["order_id"], "reason": facts["reason"]}}
    return [{"content": None, "tool_calls": [c]} for c in (verify, cancel)] + [
        {"content": f"Order #{facts['order_id']} has been cancelled."}]


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    """One verifiers run: the embedded agent's rollouts of retail (one tool call per turn, both outcomes) replayed,
    and a cancellation in our own words that never asks the user to confirm."""
    domain, found = load_domain(DOMAIN), situations(DOMAIN)
    cancellation = next(s for s in found if s.intent_tool == "cancel_order" and s.expect_write
                        and s.setup.fault is None and set(s.opening_facts) == set(s.facts))
    rows = asyncio.run(run_rollouts([RolloutSpec(s, 0, 0) for s in found], Policy("agent-v2", "sim/agent-v2"),
                                    domain=domain, state=build_state(domain, 0), gateway=Gateway(fast_path=True)))
    by_id, openings, kept = {s.situation_id: s for s in found}, {cancellation.phrasings[0]}, []
    for row in rows.to_dict("records"):
        situation = by_id[row["situation_id"]]
        if any(len(m["tool_calls"] or []) > 1 for m in row["messages"]) or situation.phrasings[0] in openings:
            continue
        openings.add(situation.phrasings[0])
        kept.append((situation, row, graded(row, domain)))
    passed, failed = [k for k in kept if k[2] == 1.0], [k for k in kept if k[2] != 1.0]
    rollouts = passed[:MAX_ROWS // 2] + failed[:MAX_ROWS - MAX_ROWS // 2]
    scripts = [(s, script(row["messages"])) for s, row, _ in rollouts]
    traces, requests = play([(s, replies) for s, (replies, _) in scripts]
                            + [(cancellation, cancellation_script(cancellation))],
                            tmp_path_factory.mktemp("verifiers"))
    return rollouts, [results for _, (_, results) in scripts], traces, requests, cancellation


def test_a_replayed_rollout_earns_its_graded_reward_in_verifiers_own_loop(played):
    rollouts, results, traces, requests, _ = played
    traces = traces[:len(rollouts)]
    expected = [reward for _, _, reward in rollouts]
    assert 0 < sum(expected) < len(expected)  # both outcomes occur: the comparison is not all zeros or all ones
    assert [t.rewards["sandbox_reward"].score for t in traces] == expected
    # The world answered every call as the rollout read it, and the state carries the replayable steps.
    assert [[m.content for m in t.tool_messages] for t in traces] == results
    offline = Gateway(fast_path=True)
    rebuilt = environment_class(DOMAIN, gateway=offline)
    again = [episode_reward(replayed(rebuilt, json.dumps(s.to_row()), 0, t.state.steps), row["final_text"])
             for (s, row, _), t in zip(rollouts, traces, strict=True)]
    assert again == expected and offline.calls == 0
    # The tools the model was offered are the pack's, with their schemas as written, and message_user.
    offered = {t["function"]["name"]: t["function"]["parameters"] for t in requests[0]["tools"]}
    pack = {s["function"]["name"]: s["function"]["parameters"] for s in load_domain(DOMAIN).tool_schemas}
    assert {k: v for k, v in offered.items() if k != MESSAGE_USER} == pack and MESSAGE_USER in offered


def test_a_write_without_the_users_confirmation_earns_nothing_in_verifiers(played):
    rollouts, _, traces, _, cancellation = played
    (trace,) = traces[len(rollouts):]
    assert [s["tool"] for s in trace.state.steps] == ["verify_customer", "cancel_order"]
    assert trace.rewards["sandbox_reward"].score == 0.0  # the world took the write: only the grade refuses it
    env = replayed(environment_class(DOMAIN), json.dumps(cancellation.to_row()), 0, trace.state.steps)
    env.episode.messages.append({"role": "assistant", "content": trace.last_reply})
    violation = conduct.check(env.episode.messages, env.episode.tool_events(), trace.last_reply, env.domain,
                              env.episode.user_events, cancellation.want)
    assert violation.rule == "destructive_without_confirmation"


def test_the_taskset_plays_the_grpo_export_and_names_the_fix_for_a_bad_file(tmp_path):
    (grpo,) = [f for f in export_trl(partition.cuts("grpo_groups"), tmp_path, tools=partition.TOOLS,
                                     situations=partition.situations()) if f.dataset == "grpo"]
    rows = pd.read_parquet(grpo.path)
    tasks = list(vf.load_taskset(vf.SingleAgentEnvConfig(taskset={
        "id": "sim-pipeline-verifiers", "domain": DOMAIN, "data_files": str(grpo.path)}).taskset))
    assert [(t.data.situation, t.data.phrasing_index) for t in tasks] == list(zip(rows["situation"],
                                                                                 rows["phrasing_index"], strict=True))
    assert all(t.data.prompt[0].content for t in tasks)  # each opens with the user's words
    with pytest.raises(SimPipelineError, match="data-files"):
        list(vf.load_taskset(vf.SingleAgentEnvConfig(taskset={
            "id": "sim-pipeline-verifiers", "domain": DOMAIN, "data_files": str(tmp_path / "missing.parquet")}).taskset))
