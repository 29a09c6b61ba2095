"""OpenEnv serves the sandbox world: its own server, WebSocket client and MCP tool calls play the episodes.

The domain's environment runs in OpenEnv 0.3's FastAPI server (uvicorn, a real port); everything client-side is
OpenEnv's `MCPToolClient` (`reset`, `list_tools`, `call_tool`, `step`, `state`). The policy is scripted: the embedded
agent's rollouts, replayed call by call, and a cancellation written here in our own words. Requires the [rlenv] extra
in a venv of its own (`make test-rlenv`).
"""

import asyncio
import json
import os
import socket
import threading
import time
import warnings

import pytest

if os.environ.get("SIM_PIPELINE_RLENV_TESTS") == "required":  # CI: a missing extra is a failure, never a skip
    import openenv
else:
    openenv = pytest.importorskip("openenv", reason="the [rlenv] extra is not installed: run `make test-rlenv`")

import uvicorn

from sim_pipeline.domain import load_domain
from sim_pipeline.grade import conduct
from sim_pipeline.grade.grading import combine
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.protocol.environment_tools import MESSAGE_USER
from sim_pipeline.rollout.environment import environment_class, episode_reward, replayed
from sim_pipeline.rollout.openenv_env import SandboxEnvClient, closing_action, openenv_app
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline.world.state import build_state
from sim_pipeline_tests.rollout.test_environment import situations

GATEWAY = Gateway(fast_path=True)
DOMAIN = "retail"
warnings.filterwarnings("ignore", message=".*inputSchema.*")  # openenv-core 0.3 reads the MCP SDK 1.x field name


@pytest.fixture(scope="module")
def url():
    """The domain's OpenEnv app on a free local port, served by uvicorn in a thread."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(openenv_app(DOMAIN, gateway=GATEWAY), host="127.0.0.1", port=port,
                                          log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the OpenEnv server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


def test_the_environment_lists_the_packs_tools_with_their_schemas_and_message_user(url):
    async def listed():
        async with SandboxEnvClient(base_url=url) as env:
            await env.reset(situation=json.dumps(situations(DOMAIN)[0].to_row()), phrasing_index=0)
            return await env.list_tools()

    tools = {t.name: t for t in asyncio.run(listed())}
    pack = {s["function"]["name"]: s["function"] for s in load_domain(DOMAIN).tool_schemas}
    assert set(tools) == set(pack) | {MESSAGE_USER}
    for name, function in pack.items():
        assert tools[name].input_schema == function["parameters"]  # patterns and bounds as written
    assert tools[MESSAGE_USER].input_schema["required"] == ["message"]


def graded(row, domain) -> float:
    """What the grade step gives the rollout: the conduct rules, then the state oracle."""
    violation = conduct.check(row["messages"], list(row["tool_events"]), row["final_text"], domain,
                              list(row["user_events"]))
    return combine(violation.reward if violation else 1.0, row["oracle_reward"])


async def play(env, situation, messages) -> tuple[float, bool, list]:
    """Replay a rollout's agent turns through the client; every answer must be the one the rollout read."""
    await env.reset(situation=json.dumps(situation.to_row()), phrasing_index=0)
    texts = [i for i, m in enumerate(messages) if m["role"] == "assistant" and not m["tool_calls"]]
    for i, message in enumerate(messages[2:], start=2):
        if message["role"] != "assistant" or i == texts[-1]:
            continue
        if message["tool_calls"]:
            for k, call in enumerate(message["tool_calls"]):
                function = call["function"]
                answer = await env.call_tool(function["name"], **json.loads(function["arguments"]))
                assert answer == messages[i + 1 + k]["content"]
        else:
            assert await env.call_tool(MESSAGE_USER, message=message["content"]) == messages[i + 1]["content"]
    result = await env.step(closing_action(messages[texts[-1]]["content"]))
    return result.reward, result.done, (await env.state()).steps


def test_a_replayed_rollout_earns_its_graded_reward_over_openenv_and_from_its_state(url):
    domain, found = load_domain(DOMAIN), situations(DOMAIN)
    rows = asyncio.run(run_rollouts([RolloutSpec(s, 0, 0) for s in found], Policy("agent-v2", "sim/agent-v2"),
                                    domain=domain, state=build_state(domain, 0), gateway=GATEWAY))
    by_id = {s.situation_id: s for s in found}
    rows = [r for r in rows.to_dict("records") if all(len(m["tool_calls"] or []) <= 1 for m in r["messages"])]
    offline = Gateway(fast_path=True)  # the reward worker never asks the user model: the replies are in the steps
    rebuilt_class = environment_class(domain, gateway=offline)

    async def replay_all():
        async with SandboxEnvClient(base_url=url) as env:
            return [await play(env, by_id[r["situation_id"]], r["messages"]) for r in rows]

    played = asyncio.run(replay_all())
    expected = [graded(r, domain) for r in rows]
    assert len(rows) >= 0.9 * len(found) and all(done for _, done, _ in played)
    assert [reward for reward, _, _ in played] == expected
    closing = [[m for m in r["messages"] if m["role"] == "assistant" and not m["tool_calls"]][-1]["content"]
               for r in rows]
    again = [episode_reward(replayed(rebuilt_class, json.dumps(by_id[r["situation_id"]].to_row()), 0, steps), text)
             for r, (_, _, steps), text in zip(rows, played, closing, strict=True)]
    assert again == expected and offline.calls == 0
    assert 0 < sum(expected) < len(expected)  # both outcomes occur: the comparison is not all zeros


def test_a_write_without_the_users_confirmation_earns_nothing(url):
    cancellation = next(s for s in situations(DOMAIN) if s.intent_tool == "cancel_order" and s.expect_write
                        and s.setup.fault is None and set(s.opening_facts) == set(s.facts))
    facts = cancellation.facts

    async def cancel(*, confirm: bool) -> float:
        async with SandboxEnvClient(base_url=url) as env:
            await env.reset(situation=json.dumps(cancellation.to_row()), phrasing_index=0)
            verified = json.loads(await env.call_tool("verify_customer", email=facts["email"],
                                                      order_id=facts["order_id"]))
            assert verified["status"] == "ok"
            if confirm:
                await env.call_tool(MESSAGE_USER, message=f"Thanks, you're verified. Shall I cancel order "
                                                          f"#{facts['order_id']} now? This cannot be undone.")
            done = json.loads(await env.call_tool("cancel_order", order_id=facts["order_id"], reason=facts["reason"]))
            assert done["status"] != "rejected"  # the world applied the write: only the grade refuses it
            result = await env.step(closing_action(f"Order #{facts['order_id']} has been cancelled."))
            return result.reward

    assert asyncio.run(cancel(confirm=True)) == 1.0
    assert asyncio.run(cancel(confirm=False)) == 0.0
