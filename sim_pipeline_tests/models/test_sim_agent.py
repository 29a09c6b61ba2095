"""The embedded agents are real stochastic policies: exact decision log-probabilities, v2 errs less than v1."""

import collections
import json
import math

import pytest

from sim_pipeline import defaults
from sim_pipeline.domain import load_domain
from sim_pipeline.models.sim_agent import SimAgent
from sim_pipeline.rollout.prompts import agent_system_prompt

DOMAIN = load_domain("retail")


def transcript(user_text):
    return [{"role": "system", "content": agent_system_prompt(DOMAIN)}, {"role": "user", "content": user_text}]


# Verified identity, all arguments known, confirmation not yet asked: ask (correct) or act (flaw).
CONFIRM_POINT = transcript("I'd like to cancel my order. My order id is 62535. The reason is I changed my mind. "
                           "My email is ben.kowalski14@fastmail.com.") + [
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
        "name": "verify_customer", "arguments": '{"email": "ben.kowalski14@fastmail.com", "order_id": "62535"}'}}]},
    {"role": "tool", "content": '{"status": "ok", "verified": true}', "tool_call_id": "c1", "name": "verify_customer"},
]


@pytest.mark.parametrize("version", ["agent-v1", "agent-v2"])
def test_logprob_is_the_exact_probability_of_the_emitted_message(version):
    agent = SimAgent(defaults.AGENT_PROFILES[version])
    draws = [agent.respond(CONFIRM_POINT, DOMAIN.tool_schemas, temperature=1.0, seed=s) for s in range(3000)]
    by_message = collections.defaultdict(list)
    for d in draws:
        # Tool-call ids are labels drawn per sample, not part of the decision: compare without them.
        calls = [{**c, "id": None} for c in d.message["tool_calls"] or []]
        by_message[json.dumps({**d.message, "tool_calls": calls}, sort_keys=True)].append(d.logprob)
    for message, logprobs in by_message.items():
        assert len(set(logprobs)) == 1, message  # one message, one probability
        p, share = math.exp(logprobs[0]), len(logprobs) / len(draws)
        assert abs(share - p) < 4 * math.sqrt(p * (1 - p) / len(draws)) + 1e-3, (message, share, p)
    assert {d.action for d in draws} >= {"ask_confirmation", "skip_confirmation"}


def test_same_seed_same_reply_and_greedy_at_temperature_zero():
    agent = SimAgent(defaults.AGENT_PROFILES["agent-v1"])
    a = agent.respond(CONFIRM_POINT, DOMAIN.tool_schemas, temperature=1.0, seed=7)
    b = agent.respond(CONFIRM_POINT, DOMAIN.tool_schemas, temperature=1.0, seed=7)
    assert a == b
    greedy = {agent.respond(CONFIRM_POINT, DOMAIN.tool_schemas, temperature=0.0, seed=s).action for s in range(20)}
    assert greedy == {"ask_confirmation"}


def test_v2_skips_confirmation_less_often_than_v1():
    rates = {}
    for version in ("agent-v1", "agent-v2"):
        agent = SimAgent(defaults.AGENT_PROFILES[version])
        flaws = [agent.respond(CONFIRM_POINT, DOMAIN.tool_schemas, temperature=1.0, seed=s).flaw for s in range(400)]
        rates[version] = sum(f is not None for f in flaws) / len(flaws)
    assert rates["agent-v2"] < rates["agent-v1"] / 2


def test_off_topic_request_is_declined_by_the_good_policy():
    agent = SimAgent(defaults.AGENT_PROFILES["agent-v2"])
    reply = agent.respond(transcript("What is the capital of Australia?"), DOMAIN.tool_schemas, temperature=0, seed=0)
    assert reply.action == "decline" and reply.message["tool_calls"] is None
