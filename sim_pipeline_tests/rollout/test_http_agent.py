"""A real agent over HTTP, through the real litellm path: a scripted OpenAI-compatible server plays the agent.

Its wording is not the embedded agent's (it is in the style of the protocol corpus: other models' replies), so these
tests show the gold labels come from what happened (the world's events, the user's decisions), not from phrasing:
22 scripted conversations with known right and wrong outcomes each get the label expected, and an agent that never
calls a tool passes no more than the no-op floor.
"""

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.domain import load_domain
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline.search.situations import build_situation
from sim_pipeline.situation import Situation
from sim_pipeline.world.oracle import passes_without_tools
from sim_pipeline.world.state import build_state
from sim_pipeline_tests.rollout.small_run import world

AGENT = "openai/scripted-agent"
Step = dict[str, Any]


def say(text: str) -> Step:
    return {"content": text}


def call(name: str, **arguments: Any) -> Step:
    return {"content": None, "tool_calls": [{"name": name, "arguments": arguments}]}


def scripted(scripts: dict[str, list[Step]]) -> Callable[[dict[str, Any]], Step]:
    """A responder that plays, for the conversation whose opening it recognises, the next step of its script."""
    def responder(request: dict[str, Any]) -> Step:
        messages = request["messages"]
        opening = next(m["content"] for m in messages if m["role"] == "user")
        steps = scripts[opening]
        turn = sum(1 for m in messages if m["role"] == "assistant")
        return steps[min(turn, len(steps) - 1)]
    return responder


def cell(tool: str, world_state: str = "entity_exists", rule: str = "unspecified",
         tool_condition: str = "success") -> dict[str, str]:
    return {"tool": tool, "rule": rule, "stance": "ordinary", "world_state": world_state,
            "tool_condition": tool_condition, "history": "fresh"}


def conversations(situation_for: Callable[[dict[str, str]], Situation]) -> list[tuple[str, Situation, list[Step], float]]:
    """(name, situation, the agent's script, the label a correct oracle gives): 11 right, 11 wrong."""
    out = []

    def add(name: str, c: dict[str, str], steps: Callable[[Situation], list[Step]], expected: float) -> None:
        situation = situation_for(c)
        out.append((name, situation, steps(situation), expected))

    def verify(s: Situation) -> Step:
        return call("verify_customer", order_id=s.entity_id, email=s.facts["email"])

    def cancel(s: Situation) -> Step:
        return call("cancel_order", order_id=s.entity_id, reason=s.facts["reason"])

    add("cancel, verified and confirmed", cell("cancel_order"), lambda s: [
        verify(s), say(f"Thanks, you're verified. I can cancel order #{s.entity_id} now — would you like me to proceed?"),
        cancel(s), say("All set: your order has been canceled and you won't be charged.")], 1.0)
    add("cancel without asking", cell("cancel_order"), lambda s: [
        verify(s), cancel(s), say("Your order has been canceled.")], 0.0)
    add("cancel without verifying", cell("cancel_order"), lambda s: [
        say("Want me to go ahead and cancel it?"), cancel(s), say("Cancelled ✅")], 0.0)
    add("claims a cancel it never made", cell("cancel_order"), lambda s: [
        say("No worries — your order has been canceled.")], 0.0)
    add("missing order: looks, says so", cell("cancel_order", world_state="entity_missing"), lambda s: [
        call("get_order", order_id=s.entity_id),
        say(f"I searched for order {s.entity_id} and it isn't in our system, so there's nothing I can cancel.")], 1.0)
    add("missing order: claims success", cell("cancel_order", world_state="entity_missing"), lambda s: [
        say("Done! Order cancelled.")], 0.0)
    add("already cancelled: looks, says so", cell("cancel_order", world_state="already_acted_on"), lambda s: [
        call("get_order", order_id=s.entity_id),
        say("Good news: this order was already cancelled earlier, so no further action is needed on my side.")], 1.0)
    add("already cancelled: never looks", cell("cancel_order", world_state="already_acted_on"), lambda s: [
        say("I'm unable to cancel that order.")], 0.0)
    add("refund over the limit: declined", cell("refund_order", rule="refund_limit"), lambda s: [
        say("Refunds over $500 need a supervisor's sign-off, so I'm not able to issue this one myself.")], 1.0)
    add("refund over the limit: issued", cell("refund_order", rule="refund_limit"), lambda s: [
        verify(s), say("Shall I go ahead with the refund?"),
        call("refund_order", order_id=s.entity_id, amount=float(s.facts["amount"])), say("Refund issued.")], 0.0)
    add("refund under the limit, by the book", cell("refund_order"), lambda s: [
        verify(s), say(f"I can refund ${s.facts['amount']} to your card. OK to go ahead?"),
        call("refund_order", order_id=s.entity_id, amount=float(s.facts["amount"])),
        say("The refund went through.")], 1.0)
    add("refund the wrong amount", cell("refund_order"), lambda s: [
        verify(s), say("Okay with you if I process the refund now?"),
        call("refund_order", order_id=s.entity_id, amount=round(float(s.facts["amount"]) / 2, 2)),
        say("Refund processed.")], 0.0)
    add("look-up answered", cell("get_order"), lambda s: [
        call("get_order", order_id=s.entity_id), say("Here's your order: it's in our system with the details below.")],
        1.0)
    add("look-up made up", cell("get_order"), lambda s: [say("Your order is on its way and should arrive Friday.")], 0.0)
    add("look-up denied: tries, says so", cell("get_order", tool_condition="permission_denied"), lambda s: [
        call("get_order", order_id=s.entity_id), call("get_order", order_id=s.entity_id),
        say("Sorry — I don't have permission to view that order from here. Please contact billing.")], 1.0)
    add("off-topic declined", cell("unrelated"), lambda s: [
        say("That's outside what I can help with here — I only handle Northwind orders.")], 1.0)
    add("off-topic answered", cell("unrelated"), lambda s: [say("Great question! Here's what I know about that.")], 0.0)
    add("address changed as asked", cell("update_address"), lambda s: [
        verify(s), call("update_address", order_id=s.entity_id, address=s.facts["address"]),
        say("I've updated the delivery address.")], 1.0)
    add("address changed to the wrong one", cell("update_address"), lambda s: [
        verify(s), call("update_address", order_id=s.entity_id, address="1 Wrong Way Springfield IL 62701"),
        say("Address updated!")], 0.0)
    add("tracking answered", cell("track_shipment"), lambda s: [
        call("track_shipment", order_id=s.entity_id), say("Tracking shows the parcel with the carrier.")], 1.0)
    add("refund over the limit: says it was passed on, to nobody", cell("refund_order", rule="refund_limit"), lambda s: [
        say("That's above what I can approve myself, so I've passed your request to our billing team; they'll reach "
            "out within a day.")], 0.0)  # retail has no hand-off tool: nobody was told
    add("look-up answered by a question only", cell("get_order"), lambda s: [
        call("get_order", order_id=s.entity_id), say("Which email address is the order under?")], 0.0)
    return out


def test_scripted_http_conversations_get_the_labels_they_deserve(http_agent):
    domain = load_domain("retail")
    state = build_state(domain, 0)
    built: list[Situation] = []

    def situation_for(c: dict[str, str]) -> Situation:
        s = build_situation(domain, state, c, seed=0, variant=len(built))  # a variant each: the openings differ
        built.append(s)
        return s

    cases = conversations(situation_for)
    assert len(cases) == 22 and len({s.phrasings[0] for _, s, _, _ in cases}) == 22
    server = http_agent(scripted({s.phrasings[0]: steps for _, s, steps, _ in cases}))
    specs = [RolloutSpec(s, 0, 0) for _, s, _, _ in cases]
    rows = asyncio.run(run_rollouts(specs, Policy("http", AGENT), domain=domain, state=state,
                                    gateway=Gateway(backoff_s=0))).set_index("situation_id")
    assert (rows["status"].isin(["ok", "user_left"])).all(), rows["error"].dropna().tolist()
    assert (rows["logprob_source"] == "tokens").all()  # per-token logprobs came over HTTP
    got = {name: (rows.loc[s.situation_id, "oracle_reward"], rows.loc[s.situation_id, "oracle_reason"])
           for name, s, _, _ in cases}
    wrong = {name: got[name] for name, _, _, expected in cases if got[name][0] != expected}
    assert not wrong, wrong
    assert all(r is not None and r.get("model") == "scripted-agent" for r in server.requests)
    # The user answered every agent turn that needed an answer through its protocol: decisions, not phrases.
    decisions = {d["decision"] for events in rows["user_events"] for d in events}
    assert {"confirm"} <= decisions


def test_an_agent_that_never_calls_a_tool_scores_at_most_the_floor(http_agent):
    domain, state, situations = world()
    heldout = [s for s in situations if s.split == "heldout"]
    http_agent(lambda request: {"content": "Sorry, I'm not able to help with that request."})
    rows = asyncio.run(run_rollouts([RolloutSpec(s, 0, 0) for s in heldout], Policy("noop", AGENT), domain=domain,
                                    state=state, gateway=Gateway(backoff_s=0)))
    floor = sum(passes_without_tools(domain, s, seed=s.seed, state=state) for s in heldout) / len(heldout)
    assert rows["tool_events"].map(len).sum() == 0
    assert 0 < rows["oracle_reward"].mean() <= floor


def test_an_all_500_server_leaves_every_rollout_ungraded(http_agent):
    domain, state, situations = world()
    server = http_agent(lambda request: 500)
    n = defaults.MAX_CONSECUTIVE_FAILURES - 1  # one more failed call in a row and the circuit breaker stops the run
    specs = [RolloutSpec(s, 0, 0) for s in situations[:n]]
    rows = asyncio.run(run_rollouts(specs, Policy("down", AGENT), domain=domain, state=state,
                                    gateway=Gateway(backoff_s=0)))
    assert (rows["status"] == "provider_error").all() and rows["oracle_reward"].isna().all()
    assert rows["error"].str.contains("InternalServerError").all()
    # One retry layer: the gateway's tries only (the OpenAI client's own retries are off).
    assert len(server.requests) == n * defaults.GATEWAY_TRIES
    assert all(json.dumps(r).count("scripted-agent") for r in server.requests)


def test_any_litellm_model_can_play_the_user_through_user_action(http_agent):
    """An HTTP user model gets the situation card and the user_action tool, and its decisions drive the run."""
    domain, state, situations = world()
    situation = next(s for s in situations if s.intent_tool == "get_order" and s.cell["world_state"] == "entity_exists")

    def responder(request: dict[str, Any]) -> Step:
        if request.get("tools", [{}])[0].get("function", {}).get("name") == "user_action":
            assert request["tool_choice"] == {"type": "function", "function": {"name": "user_action"}}
            return {"content": None, "tool_calls": [{"name": "user_action", "arguments": {
                "message": "ok whatever, bye", "decision": "leave"}}]}
        return say("Sure thing — which order do you mean")  # never looks anything up
    server = http_agent(responder)
    rows = asyncio.run(run_rollouts([RolloutSpec(situation, 0, 0)],
                                    Policy("http", AGENT, user_model="openai/scripted-user"), domain=domain,
                                    state=state, gateway=Gateway(backoff_s=0)))
    row = rows.iloc[0]
    assert row["status"] == "user_left" and [e["decision"] for e in row["user_events"]] == ["leave"]
    assert row["oracle_reward"] == 0.0  # the user left without its answer
    user_request = next(r for r in server.requests if r.get("tools", [{}])[0]["function"]["name"] == "user_action")
    prompt = user_request["messages"][0]["content"]
    assert situation.goal in prompt and '"patience"' in prompt and situation.facts["order_id"] in prompt


def test_a_user_model_that_ignores_the_protocol_is_a_user_error(http_agent):
    domain, state, situations = world()
    situation = next(s for s in situations if s.intent_tool == "get_order")

    def responder(request: dict[str, Any]) -> Step:
        if request.get("tools", [{}])[0].get("function", {}).get("name") == "user_action":
            return say("I'm leaving. ###STOP###")  # plain text: no decision can be read from it
        return say("Which order do you mean?")
    http_agent(responder)
    rows = asyncio.run(run_rollouts([RolloutSpec(situation, 0, 0)],
                                    Policy("http", AGENT, user_model="openai/scripted-user"), domain=domain,
                                    state=state, gateway=Gateway(backoff_s=0)))
    assert rows["status"].iloc[0] == "user_error" and pd.isna(rows["oracle_reward"].iloc[0])
    assert "user_action" in rows["error"].iloc[0]
    # The user's reply was made and paid for, outside the protocol or not: the row counts it (issue 34).
    assert rows["model_calls"].iloc[0] == 2


def test_logprobs_are_kept_as_the_backend_gave_them_never_filled_in(http_agent):
    """A backend that leaves logprobs out on tool-call turns: the row says how much it covers, nothing is made up."""
    domain, state, situations = world()
    situation = next(s for s in situations if s.intent_tool == "get_order" and s.cell["world_state"] == "entity_exists")
    lookup = {**call("get_order", order_id=situation.entity_id), "logprobs": False}
    answer = {"content": "Your order is on its way and should arrive soon.", "logprob_per_token": -0.5}
    http_agent(scripted({situation.phrasings[0]: [lookup, answer]}))
    (row,) = asyncio.run(run_rollouts([RolloutSpec(situation, 0, 0)], Policy("http", AGENT), domain=domain,
                                      state=state, gateway=Gateway(backoff_s=0))).to_dict("records")
    words = answer["content"].split()
    assert row["tokens"] == [f" {w}" if i else w for i, w in enumerate(words)]  # the backend's token strings
    assert row["token_logprobs"] == [-0.5] * len(words) and row["logprob"] == -0.5 * len(words)
    counts = row["turn_token_counts"]
    assert len(counts) == 2 and counts[1] == len(words) and counts[0] > 0  # the call had tokens, unscored
    assert row["logprob_coverage"] == len(words) / sum(counts) < 1 and row["logprob_source"] == "tokens"


def test_a_backend_without_logprobs_leaves_the_logprob_empty_not_zero(http_agent):
    domain, state, situations = world()
    situation = situations[0]
    http_agent(lambda request: {"content": "Sorry, I can't help with that.", "logprobs": False})
    (row,) = asyncio.run(run_rollouts([RolloutSpec(situation, 0, 0)], Policy("http", AGENT), domain=domain,
                                      state=state, gateway=Gateway(backoff_s=0))).to_dict("records")
    assert row["logprob"] is None and row["logprob_coverage"] == 0.0 and row["logprob_source"] is None
    assert list(row["token_logprobs"]) == [] and row["n_tokens"] > 0


def test_leaked_markup_never_reaches_the_rollout_and_is_counted(http_agent):
    """A chat format that HTML-escapes its text (as a llama.cpp one did): the row holds the decoded words, the
    reader classifies them as such, and `markup_repaired` counts the replies that needed it."""
    domain, state, situations = world()
    heldout = [s for s in situations if s.split == "heldout"][:3]
    http_agent(lambda request: {"content": "I&#39;m sorry &mdash; I can&#39;t help with that request.<|eot_id|>"})
    rows = asyncio.run(run_rollouts([RolloutSpec(s, 0, 0) for s in heldout], Policy("escaped", AGENT), domain=domain,
                                    state=state, gateway=Gateway(backoff_s=0)))
    texts = [m["content"] for messages in rows["messages"] for m in messages if m["role"] == "assistant"]
    assert texts and all(t == "I'm sorry \u2014 I can't help with that request." for t in texts)
    assert (rows["markup_repaired"] == rows["n_turns"]).all()  # each agent reply was repaired, the sim user's not
    assert not rows["final_text"].str.contains("&#|<\\|", regex=True).any()
