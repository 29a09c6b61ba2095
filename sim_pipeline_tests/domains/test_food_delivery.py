"""food_delivery: nested arguments (an order's dishes, a delivery address) and linked entities, end to end.

An order belongs to a customer and comes from a restaurant; each entity has its own id shape. The world draws
linked, schema-true records; a new order checks its parents; verifying the order's customer counts as verifying
for a change to the order; and an agent that speaks through real HTTP (wording not ours) places an order whose
list-of-objects argument round-trips through the world and the rollout row.
"""

import asyncio
import json
import re

import jsonschema
import pandas as pd
import pytest

from sim_pipeline import cover
from sim_pipeline.axes import axis_values, validated_constraints
from sim_pipeline.domain import load_domain
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline.rollout.simulate import specs_for
from sim_pipeline.rollout.world_fit import domain_fit, fit_problems
from sim_pipeline.search.situations import build_situation, build_situations
from sim_pipeline.situation import Situation
from sim_pipeline.world.oracle import label
from sim_pipeline.world.sandbox import Sandbox
from sim_pipeline.world.state import build_state
from sim_pipeline_tests.rollout.test_http_agent import call, say, scripted

DOMAIN = load_domain("food_delivery")


def _schema(tool, argument):
    return DOMAIN.tool(tool).parameters["properties"][argument]


@pytest.fixture(scope="module")
def state():
    return build_state(DOMAIN, 0)


def test_records_are_linked_and_schema_true(state):
    assert {e.name: e.id_pattern for e in DOMAIN.entities} == {
        "customer": "^C[0-9]{4}$", "restaurant": "^R[0-9]{3}$", "order": "^[0-9]{6}$"}
    for entity in DOMAIN.entities:
        assert all(re.fullmatch(entity.id_pattern, key) for key in state[entity.name])
    items, address = _schema("place_order", "items"), _schema("place_order", "delivery_address")
    for order in state["order"].values():
        assert order["customer_id"] in state["customer"] and order["restaurant_id"] in state["restaurant"]
        jsonschema.validate(order["items"], items)
        jsonschema.validate(order["delivery_address"], address)
    sizes = {len(o["items"]) for o in state["order"].values()}
    assert min(sizes) >= 1 and max(sizes) > 1  # orders of one to several dishes


def test_reads_across_entities_agree(state):
    world = Sandbox(DOMAIN, seed=0, state=state, setup=build_situation(
        DOMAIN, state, {"tool": "get_order", "rule": "unspecified", "stance": "ordinary", "world_state":
                        "entity_exists", "tool_condition": "success", "history": "fresh"}, seed=0).setup)
    order_id, order = next(iter(sorted(state["order"].items())))
    shown = world.call("get_order", {"order_id": order_id})["order"]
    listed = world.call("list_orders", {"customer_id": order["customer_id"]})["orders"]
    assert shown["items"] == order["items"] and order_id in {o["order_id"] for o in listed}
    assert all(o["customer_id"] == order["customer_id"] for o in listed)
    assert world.call("get_customer", {"customer_id": order["customer_id"]})["status"] == "ok"


def test_a_new_order_checks_its_parents(state):
    world = Sandbox(DOMAIN, seed=0, state=state, setup=build_situation(
        DOMAIN, state, {"tool": "place_order", "rule": "unspecified", "stance": "ordinary", "world_state":
                        "entity_exists", "tool_condition": "success", "history": "fresh"}, seed=0).setup)
    customer, restaurant = sorted(state["customer"])[0], sorted(state["restaurant"])[0]
    order = {"customer_id": customer, "restaurant_id": restaurant,
             "items": [{"dish": "pad thai", "quantity": 2}, {"dish": "lemonade", "quantity": 1}],
             "delivery_address": {"street": "12 Harbor Lane", "city": "Portland", "zip": "97201"}}
    ghost = {**order, "customer_id": "C0000" if "C0000" not in state["customer"] else "C0001"}
    assert world.call("place_order", ghost) == {"status": "not_found", "message": f"no customer with id "
                                                                                  f"{ghost['customer_id']}"}
    made = world.call("place_order", order)
    assert made["status"] == "created" and re.fullmatch(r"[0-9]{6}", made["order"]["order_id"])
    again = world.call("get_order", {"order_id": made["order"]["order_id"]})["order"]
    assert again["items"] == order["items"] and again["delivery_address"] == order["delivery_address"]
    bad = world.call("place_order", {**order, "items": [{"dish": "pad thai", "quantity": 9}]})
    assert (bad["status"], bad["error"], bad["field"]) == ("rejected", "invalid_argument", "items/0/quantity")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_situation_is_solvable(seed):
    table = build_situations(DOMAIN, build_state(DOMAIN, seed), cover.covering_array(
        axis_values(DOMAIN), seed=seed, constraints=validated_constraints(DOMAIN)), seed=seed, n_phrasings=1)
    assert table["solvable"].all(), table.loc[~table["solvable"], ["tool", "reference"]].to_string()
    placed = table[(table["intent_tool"] == "place_order") & table["expect_write"]]
    assert len(placed) and all(isinstance(json.loads(f)["items"], list) for f in placed["facts"])


def _cancel_situation(state):
    return build_situation(DOMAIN, state, {"tool": "cancel_order", "rule": "unspecified", "stance": "ordinary",
                                           "world_state": "entity_exists", "tool_condition": "success",
                                           "history": "fresh"}, seed=0)


def _cancel(state, customer_id):
    """Verify a customer, confirm, cancel the situation's order: the oracle's label."""
    s = _cancel_situation(state)
    world = Sandbox(DOMAIN, seed=0, setup=s.setup, state=state)
    world.call("verify_customer", {"customer_id": customer_id, "email": state["customer"][customer_id]["email"]})
    world.call("cancel_order", {"order_id": s.entity_id, "reason": s.facts["reason"]})
    messages = [{"role": "user", "content": s.phrasings[0]}, {"role": "tool", "content": "{}"},
                {"role": "assistant", "content": "Shall I cancel it?"}, {"role": "user", "content": "yes"},
                {"role": "tool", "content": "{}"}, {"role": "assistant", "content": "Your order is cancelled."}]
    return label(DOMAIN, s, world.events, world.snapshot(), messages, [{"turn": 3, "decision": "confirm"}])


def test_verifying_the_orders_customer_verifies_the_user(state):
    s = _cancel_situation(state)
    owner = s.facts["customer_id"]
    other = next(c for c in sorted(state["customer"]) if c != owner)
    assert _cancel(state, owner).reward == 1.0
    assert "rule verify_identity" in _cancel(state, other).reason


def test_agent_v2_forms_nested_calls_the_world_accepts():
    table = build_situations(DOMAIN, build_state(DOMAIN, 0), cover.covering_array(
        axis_values(DOMAIN), seed=0, constraints=validated_constraints(DOMAIN)), seed=0, n_phrasings=1)
    specs = specs_for([Situation.from_row(r) for r in table.to_dict("records")], samples=range(2), n_phrasings=1,
                      batch=0)
    rows = asyncio.run(run_rollouts(specs, Policy("food-v2", "sim/agent-v2"), domain=DOMAIN,
                                    state=build_state(DOMAIN, 0), gateway=Gateway()))
    fit = domain_fit(DOMAIN, rows, table).set_index("tool")
    assert fit_problems(fit.reset_index()) == []
    writes = fit[fit["writes"]]
    assert (writes["write_applied"] >= 0.8 * writes["write_tried"]).all() and writes["write_tried"].min() > 0
    # Every list or object the agent formed was accepted: the world refused no nested argument it filled in (a
    # refused call here is an id the agent made up where the user had not said one yet: a flaw, not a misfit).
    nested, refused = 0, []
    for row in rows.to_dict("records"):
        for event in row["tool_events"]:
            arguments = json.loads(event["arguments"])
            formed = {k for k, v in arguments.items() if isinstance(v, (list, dict))}
            nested += bool(formed)
            if event["status"] == "rejected" and str(event.get("field") or "").split("/")[0] in formed:
                refused.append((event["tool"], event["field"], event["error"]))
    assert nested > 40 and refused == [], refused


def test_a_real_agent_over_http_places_a_nested_order(http_agent, state):
    s = build_situation(DOMAIN, state, {"tool": "place_order", "rule": "unspecified", "stance": "ordinary",
                                        "world_state": "entity_exists", "tool_condition": "success",
                                        "history": "fresh"}, seed=0)
    f = s.facts
    http_agent(scripted({s.phrasings[0]: [
        call("verify_customer", customer_id=f["customer_id"], email=f["email"]),
        say("You're verified ✔️ Just to double-check before I submit: " + ", ".join(
            f"{i['quantity']}× {i['dish']}" for i in f["items"]) + " to your address — shall I place it?"),
        call("place_order", customer_id=f["customer_id"], restaurant_id=f["restaurant_id"], items=f["items"],
             delivery_address=f["delivery_address"]),
        say("Order's in! 🎉 You'll get a notification once the kitchen starts on it.")]}))
    rows = asyncio.run(run_rollouts([RolloutSpec(s, 0, 0)], Policy("http", "openai/scripted-agent"), domain=DOMAIN,
                                    state=state, gateway=Gateway()))
    row = rows.iloc[0]
    assert row["oracle_reward"] == 1.0, row["oracle_reason"]
    placed = [e for e in row["tool_events"] if e["tool"] == "place_order"]
    assert placed and placed[0]["applied"] and json.loads(placed[0]["arguments"])["items"] == f["items"]
    assert pd.Series([row["status"]]).isin(["ok", "user_left"]).all()


# -- rules that bite: each kind puts situations under stress and the oracle holds the agent to it -----------------
def _cell(tool, rule, world_state="entity_exists"):
    return {"tool": tool, "rule": rule, "stance": "ordinary", "world_state": world_state,
            "tool_condition": "success", "history": "fresh"}


def _play(state, s, calls, reply, confirm=True):
    """Run calls in the situation's world, then a reply; the oracle's verdict."""
    world = Sandbox(DOMAIN, seed=0, setup=s.setup, state=state)
    messages = [{"role": "user", "content": s.phrasings[0]}]
    if confirm:
        messages += [{"role": "assistant", "content": "Shall I go ahead?"}, {"role": "user", "content": "yes"}]
    for name, args in calls:
        world.call(name, args)
        messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": name, "type": "function",
                      "function": {"name": name, "arguments": json.dumps(args)}}]},
                     {"role": "tool", "content": "{}", "tool_call_id": name}]
    messages.append({"role": "assistant", "content": reply})
    events = [{"turn": 2, "decision": "confirm"}] if confirm else []
    return label(DOMAIN, s, world.events, world.snapshot(), messages, events), world


def _verify(s, state):
    order = state["order"].get(s.entity_id) or dict(s.setup.upserts[-1][1])
    customer = order["customer_id"]
    return ("verify_customer", {"customer_id": customer, "email": state["customer"][customer]["email"]})


def test_an_ineligible_record_must_be_found_out_and_declined(state):
    s = build_situation(DOMAIN, state, _cell("cancel_order", "cancel_before_pickup"), seed=0)
    record = dict(next(r for e, r in s.setup.upserts if e == "order"))
    assert s.notes["ineligible"] and record["status"] not in ("placed", "preparing") and not s.expect_write
    cancel = ("cancel_order", {"order_id": s.entity_id, "reason": s.facts["reason"]})
    verdict, world = _play(state, s, [_verify(s, state), cancel], "I'm sorry, I can't cancel it: the courier already has it.")
    assert world.events[-1].result["error"] == "invalid_state" and verdict.reward == 1.0
    # The world refusing the cancel does not excuse trying it unverified.
    unverified, _ = _play(state, s, [cancel], "I'm sorry, I can't cancel it: the courier already has it.")
    assert unverified.reward == 0.0 and "rule verify_identity" in unverified.reason


def test_a_refund_over_the_limit_goes_to_a_human(state):
    s = build_situation(DOMAIN, state, _cell("refund_order", "refund_limit"), seed=0)
    assert float(s.facts["amount"]) > 40 and not s.expect_write
    declined, _ = _play(state, s, [], "Sorry, that is over our limit, I can't refund it.", confirm=False)
    assert declined.reward == 0.0 and "rule refund_handover" in declined.reason
    handed, _ = _play(state, s, [("transfer_to_human_agent", {"summary": "refund above the limit"})],
                      "I've passed this to a specialist.", confirm=False)
    assert handed.reward == 1.0


def test_a_value_the_policy_does_not_allow_is_stressed_and_held(state):
    s = build_situation(DOMAIN, state, _cell("refund_order", "no_cash_refunds"), seed=0)
    assert s.facts["method"] == "cash" and not s.expect_write
    args = {"order_id": s.entity_id, "amount": float(s.facts["amount"]), "method": "cash", "reason": s.facts["reason"]}
    paid, _ = _play(state, s, [_verify(s, state), ("refund_order", args)], "Refunded in cash.")
    assert paid.reward == 0.0
    other = build_situation(DOMAIN, state, _cell("refund_order", "unspecified"), seed=0)
    assert other.facts["method"] in ("original_payment", "store_credit")  # not under stress: an allowed value


def test_one_refund_per_conversation(state):
    s = build_situation(DOMAIN, state, _cell("refund_order", "one_refund"), seed=0)
    assert s.expect_write
    args = {"order_id": s.entity_id, "amount": float(s.facts["amount"]), "method": s.facts["method"],
            "reason": s.facts["reason"]}
    once, _ = _play(state, s, [_verify(s, state), ("refund_order", args)], "Your refund is on its way.")
    twice, _ = _play(state, s, [_verify(s, state), ("refund_order", args), ("refund_order", args)],
                     "Your refund is on its way.")
    assert once.reward == 1.0 and twice.reward == 0.0 and "rule one_refund" in twice.reason


def test_a_hand_off_over_http_ends_the_conversation(http_agent, state):
    s = build_situation(DOMAIN, state, _cell("refund_order", "refund_limit"), seed=0)
    http_agent(scripted({s.phrasings[0]: [
        call("transfer_to_human_agent", summary=f"Refund of ${s.facts['amount']} requested, above what I may approve"),
        say("That amount needs one of my colleagues — I've passed your case over and they'll reach out shortly.")]}))
    rows = asyncio.run(run_rollouts([RolloutSpec(s, 0, 0)], Policy("http", "openai/scripted-agent"), domain=DOMAIN,
                                    state=state, gateway=Gateway()))
    row = rows.iloc[0]
    assert (row["status"], row["finish_reason"], row["oracle_reward"]) == ("ok", "transferred", 1.0)
    assert len(row["user_events"]) == 0  # handed over before the user was asked anything
