"""The RL environment: a training episode is graded exactly as the same conversation's rollout, in every pack.

The environment is driven the way TRL drives it: `reset(**row)`, tool methods called with keyword arguments,
`message_user` for the agent's words before its last message, and `sandbox_reward` with the closing message.
"""

import asyncio
import json

import pytest

from sim_pipeline.axes import axis_values, validated_constraints
from sim_pipeline.cover import covering_array
from sim_pipeline.domain import load_domain
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.grade import conduct
from sim_pipeline.grade.grading import combine
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.environment import (
    MESSAGE_USER,
    environment_class,
    episode_reward,
    final_text,
    replayed,
    sandbox_reward,
)
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline.search.situations import build_situations
from sim_pipeline.situation import Situation
from sim_pipeline.world.infer import infer_domain
from sim_pipeline.world.state import build_state

GATEWAY = Gateway(fast_path=True)


def situations(name: str) -> list[Situation]:
    domain = load_domain(name)
    cells = covering_array(axis_values(domain), seed=0, constraints=validated_constraints(domain))
    table = build_situations(domain, build_state(domain, 0), cells, seed=0, n_phrasings=1)
    return [Situation.from_row(r) for r in table.to_dict("records")]


def started(env_class, situation: Situation):
    env = env_class()
    env.reset(situation=json.dumps(situation.to_row()), phrasing_index=0, prompt=None, rewards=[1.0, 0.0])
    return env


def replay(env, row: dict) -> float:
    """Play a rollout's agent turns into the environment, checking the world and the user answer the same."""
    messages = row["messages"]
    texts = [i for i, m in enumerate(messages) if m["role"] == "assistant" and not m["tool_calls"]]
    for i, message in enumerate(messages[2:], start=2):
        if message["role"] != "assistant":
            continue
        if message["tool_calls"]:
            for k, call in enumerate(message["tool_calls"]):
                function = call["function"]
                result = getattr(env, function["name"])(**json.loads(function["arguments"]))
                assert result == messages[i + 1 + k]["content"]
        elif i != texts[-1]:
            assert asyncio.run(env.message_user(message["content"])) == messages[i + 1]["content"]
    (reward,) = sandbox_reward([[{"role": "assistant", "content": messages[texts[-1]]["content"]}]], [env])
    return reward


@pytest.mark.parametrize("name", ["retail", "it_helpdesk", "food_delivery"])
def test_a_training_episode_earns_what_the_grader_gives_the_same_rollout(name):
    domain, found = load_domain(name), situations(name)
    rows = asyncio.run(run_rollouts([RolloutSpec(s, 0, 0) for s in found], Policy("agent-v2", "sim/agent-v2"),
                                    domain=domain, state=build_state(domain, 0), gateway=GATEWAY))
    env_class, by_id = environment_class(domain, gateway=GATEWAY), {s.situation_id: s for s in found}
    # A trainer that keeps only the recorded steps (verl) rebuilds each episode without asking the user again.
    offline = Gateway(fast_path=True)
    rebuilt_class = environment_class(domain, gateway=offline)
    rewards, graded, rebuilt = [], [], []
    for row in rows.to_dict("records"):
        if any(len(m["tool_calls"] or []) > 1 for m in row["messages"]):
            continue  # parallel calls: TRL runs them one by one, so the turns would not line up
        violation = conduct.check(row["messages"], list(row["tool_events"]), row["final_text"], domain,
                                  list(row["user_events"]))
        graded.append(combine(violation.reward if violation else 1.0, row["oracle_reward"]))
        env = started(env_class, by_id[row["situation_id"]])
        rewards.append(replay(env, row))
        again = replayed(rebuilt_class, json.dumps(by_id[row["situation_id"]].to_row()), 0, json.loads(
            json.dumps(env.steps)))  # the steps as they travel: plain JSON
        closing = env.episode.messages[-1]["content"]
        assert again.episode.messages == env.episode.messages[:-1] and again.steps == env.steps
        assert again.episode.user_events == env.episode.user_events
        rebuilt.append(episode_reward(again, closing))
    assert len(rewards) >= 0.9 * len(rows) and rewards == graded == rebuilt and offline.calls == 0
    assert 0 < sum(rewards) < len(rewards)  # both outcomes occur: the comparison is not all zeros


@pytest.fixture(scope="module")
def cancellation() -> Situation:
    """A retail cancellation the user states in full: the policy asks to verify, then confirm, then act."""
    return next(s for s in situations("retail") if s.intent_tool == "cancel_order" and s.expect_write
                and s.setup.fault is None and set(s.opening_facts) == set(s.facts))


def test_an_agent_in_its_own_words_earns_the_reward_only_when_it_follows_the_policy(cancellation):
    env_class = environment_class("retail", gateway=GATEWAY)
    facts = cancellation.facts

    def play(*, verify: bool, confirm: bool) -> tuple[float, object]:
        env = started(env_class, cancellation)
        if verify:
            assert json.loads(env.verify_customer(email=facts["email"], order_id=facts["order_id"]))["status"] == "ok"
        if confirm:
            answer = asyncio.run(env.message_user(
                f"Thanks, you're verified. Shall I cancel order #{facts['order_id']} now? This cannot be undone."))
            assert answer and env.episode.user_events[-1]["decision"] == "confirm"
        env.cancel_order(order_id=facts["order_id"], reason=facts["reason"])
        closing = [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "cancel_order"}}]},
                   {"role": "tool", "content": "{}"},
                   {"role": "assistant", "content": f"Order #{facts['order_id']} has been cancelled."}]
        return sandbox_reward([closing], [env])[0], env

    assert play(verify=True, confirm=True)[0] == 1.0
    reward, env = play(verify=True, confirm=False)
    assert reward == 0.0 and conduct.check(env.episode.messages, env.episode.tool_events(), "", env.domain,
                                           env.episode.user_events, cancellation.want).rule == \
        "destructive_without_confirmation"
    assert play(verify=False, confirm=True)[0] == 0.0


def test_a_call_outside_the_schema_is_answered_with_the_field_and_recorded(cancellation):
    env = started(environment_class("retail", gateway=GATEWAY), cancellation)
    result = json.loads(env.get_order(order_id="not-an-id"))
    assert result["status"] == "rejected" and "order_id" in json.dumps(result)
    assert [e["status"] for e in env.episode.tool_events()] == ["rejected"]


def test_the_environment_refuses_rows_it_cannot_replay_with_the_fix(cancellation):
    env_class = environment_class("retail", gateway=GATEWAY)
    with pytest.raises(SimPipelineError, match="call reset"):
        env_class().get_order(order_id="1234")
    with pytest.raises(SimPipelineError, match="no `situation` column.*sim-pipeline export"):
        env_class().reset(prompt=[{"role": "user", "content": "hi"}])
    with pytest.raises(SimPipelineError, match="environment_class\\('retail'\\)"):
        environment_class("it_helpdesk", gateway=GATEWAY)().reset(situation=json.dumps(cancellation.to_row()))


def test_the_conversation_ends_for_the_user_once_they_leave_or_are_satisfied(cancellation):
    env = started(environment_class("retail", gateway=GATEWAY), cancellation)
    env.verify_customer(email=cancellation.facts["email"], order_id=cancellation.facts["order_id"])
    asyncio.run(env.message_user("Can I cancel it for you now?"))
    env.cancel_order(order_id=cancellation.facts["order_id"], reason=cancellation.facts["reason"])
    asyncio.run(env.message_user("Done: your order is cancelled."))
    assert env.episode.user_events[-1]["decision"] == "satisfied"
    before = len(env.episode.messages)
    assert "left the conversation" in asyncio.run(env.message_user("Anything else?"))
    assert len(env.episode.messages) == before


def test_tools_an_environment_cannot_expose_as_methods_are_refused_by_name():
    def tool(name: str, argument: str) -> dict:
        return {"type": "function", "function": {"name": name, "description": "A tool.", "parameters": {
            "type": "object", "properties": {argument: {"type": "string"}}, "required": [argument]}}}

    with pytest.raises(SimPipelineError, match=f"tool '{MESSAGE_USER}'.*rename the tool"):
        environment_class(infer_domain([tool(MESSAGE_USER, "text")]))
    with pytest.raises(SimPipelineError, match="argument 'order-id' is not a Python identifier"):
        environment_class(infer_domain([tool("get_order", "order-id")]))


@pytest.mark.parametrize(("completion", "closing"), [
    ("<think>They want it changed; I could just say done.</think>\n\nI found no such order, so nothing changed.",
     "I found no such order, so nothing changed."),
    ("so I will claim success.</think>No order matches that number.", "No order matches that number."),  # opened in
    ([{"role": "assistant", "content": "Your order is gone?"},  # the prompt by the template
      {"role": "assistant", "content": "Checked: no order 5. <think>maybe tell them it's cancelled"}],
     "Checked: no order 5."),  # cut off mid-thought: the unfinished block is not said
    ("All done.", "All done."),
])
def test_the_closing_message_is_what_the_user_reads_without_reasoning_blocks(completion, closing):
    assert final_text(completion) == closing
