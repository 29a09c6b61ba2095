"""The state oracle: creates, the same record verified and changed, confirmations as user decisions, argument
limits, reads, deletes, and what a situation where nothing may change needs (found out and told, or declined)."""

import dataclasses
import json
from typing import Any

import pytest

from sim_pipeline.domain import Domain
from sim_pipeline.protocol.user_events import CONFIRM, REFUSE, user_event
from sim_pipeline.search.situations import build_situation
from sim_pipeline.situation import Situation
from sim_pipeline.world.infer import infer_domain
from sim_pipeline.world.oracle import goal_reached, label, passes_without_tools
from sim_pipeline.world.sandbox import Sandbox
from sim_pipeline.world.state import build_state

# Wording that is not the embedded agent's: the oracle must not care how a confirmation was asked or given.
ASK = {"role": "assistant", "content": "Would you like me to proceed?"}
YES = {"role": "user", "content": "Yes please."}


def _cell(tool: str, world_state: str = "entity_exists", rule: str = "unspecified",
          tool_condition: str = "success") -> dict[str, str]:
    return {"tool": tool, "rule": rule, "stance": "ordinary", "world_state": world_state,
            "tool_condition": tool_condition, "history": "fresh"}


def _situation(domain: Domain, tool: str, **cell: str) -> tuple[Situation, Any]:
    state = build_state(domain, 0)
    return build_situation(domain, state, _cell(tool, **cell), seed=0), state


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def _play(domain: Domain, situation: Situation, state: Any, calls: list[tuple[str, dict[str, Any]]], *,
          decision: str | None = CONFIRM, reply: str | None = "Here is where things stand.") -> tuple[Any, Any]:
    """A transcript as the runner records it: the ask and the user's decision, each call with its tool result, and a
    final reply; returns (verdict, sandbox)."""
    sandbox = Sandbox(domain, seed=0, situation=situation, state=state)
    messages: list[dict[str, Any]] = [{"role": "user", "content": situation.phrasings[0]}]
    events = []
    if decision is not None:
        messages += [ASK, YES if decision == CONFIRM else {"role": "user", "content": "No problem, go ahead."}]
        events.append(user_event(len(messages) - 1, decision))
    for name, args in calls:
        messages.append(_call(name, args))
        messages.append({"role": "tool", "content": json.dumps(sandbox.call(name, args)), "tool_call_id": "c"})
    if reply is not None:
        messages.append({"role": "assistant", "content": reply})
    return label(domain, situation, sandbox.events, sandbox.snapshot(), messages, events), sandbox


def _run(domain: Domain, situation: Situation, state: Any, calls: list[tuple[str, dict[str, Any]]],
         confirm: bool = True, reply: str | None = "Here is where things stand.") -> float:
    return _play(domain, situation, state, calls, decision=CONFIRM if confirm else None, reply=reply)[0].reward


def test_a_create_passes_only_with_the_users_values_and_only_once(helpdesk: Domain) -> None:
    situation, state = _situation(helpdesk, "create_ticket")
    assert situation.want.kind == "new"
    args = {k: situation.facts[k] for k in ("contact_email", "category", "summary")}
    assert _run(helpdesk, situation, state, [("create_ticket", args)]) == 1.0
    other = "hardware" if args["category"] != "hardware" else "software"
    verdict = _play(helpdesk, situation, state, [("create_ticket", {**args, "category": other})])[0]
    # the reason names the value sent and the user's own, so a reader sees the mismatch without the situation
    assert verdict.reward == 0.0 and verdict.reason.endswith(
        f"{{'category': '{other}'}}, not the user's {{'category': '{args['category']}'}}"), verdict.reason
    assert _run(helpdesk, situation, state, [("create_ticket", args), ("create_ticket", args)]) == 0.0


def test_verification_must_be_of_the_record_changed(retail: Domain) -> None:
    situation, state = _situation(retail, "cancel_order", world_state="duplicate_entity")
    order_id, twin = situation.entity_id, situation.notes["twin_id"]
    email, reason = situation.facts["email"], situation.facts["reason"]
    cancel = ("cancel_order", {"order_id": order_id, "reason": reason})
    assert _run(retail, situation, state, [("verify_customer", {"order_id": order_id, "email": email}), cancel]) == 1.0
    assert _run(retail, situation, state, [("verify_customer", {"order_id": twin, "email": email}), cancel]) == 0.0
    assert _run(retail, situation, state, [cancel]) == 0.0  # never verified
    twin_cancel = ("cancel_order", {"order_id": twin, "reason": reason})
    assert _run(retail, situation, state, [("verify_customer", {"order_id": twin, "email": email}), twin_cancel]) == 0.0


def test_a_confirmation_is_the_users_decision_not_a_phrase(retail: Domain) -> None:
    situation, state = _situation(retail, "cancel_order")
    calls = [("verify_customer", {"order_id": situation.entity_id, "email": situation.facts["email"]}),
             ("cancel_order", {"order_id": situation.entity_id, "reason": situation.facts["reason"]})]
    assert _run(retail, situation, state, calls, confirm=True) == 1.0
    assert _run(retail, situation, state, calls, confirm=False) == 0.0
    # "No problem, go ahead." recorded as a refusal is a refusal, whatever the words say.
    refused, _ = _play(retail, situation, state, calls, decision=REFUSE)
    assert refused.reward == 0.0 and "confirmation" in refused.reason


def test_refunds_stay_within_the_limit_and_the_users_amount(retail: Domain) -> None:
    situation, state = _situation(retail, "refund_order")  # the limit does not bind: the user's amount is under it
    assert situation.expect_write and float(situation.facts["amount"]) <= 500
    verify = ("verify_customer", {"order_id": situation.entity_id, "email": situation.facts["email"]})
    right = ("refund_order", {"order_id": situation.entity_id, "amount": float(situation.facts["amount"])})
    assert _run(retail, situation, state, [verify, right]) == 1.0
    over = ("refund_order", {"order_id": situation.entity_id, "amount": 900.0})
    assert _run(retail, situation, state, [verify, over]) == 0.0
    bound, bound_state = _situation(retail, "refund_order", rule="refund_limit")  # over the limit: no refund
    assert not bound.expect_write and bound.want.forbidden_by == "policy"
    # The policy alone decides: declining passes, saying nothing useful does not.
    assert _run(retail, bound, bound_state, [], reply="Refunds over $500 need a supervisor, so I can't do this one.") == 1.0
    assert _run(retail, bound, bound_state, [], reply="Let me see what I can do for you.") == 0.0


def test_reads_must_succeed_and_be_answered_unless_the_world_cannot_answer(retail: Domain) -> None:
    situation, state = _situation(retail, "get_order")
    assert _run(retail, situation, state, []) == 0.0
    read = [("get_order", {"order_id": situation.entity_id})]
    assert _run(retail, situation, state, read) == 1.0
    assert _run(retail, situation, state, read, reply=None) == 0.0  # the user never heard the answer
    missing, missing_state = _situation(retail, "get_order", world_state="entity_missing")
    assert _run(retail, missing, missing_state, []) == 0.0  # "did nothing" is not "did nothing right"
    assert _run(retail, missing, missing_state, [("get_order", {"order_id": missing.entity_id})]) == 1.0


@pytest.mark.parametrize("world_state", ["entity_missing", "already_acted_on"])
def test_where_the_world_forbids_a_change_the_agent_must_find_out_and_tell(retail: Domain, world_state: str) -> None:
    situation, state = _situation(retail, "cancel_order", world_state=world_state)
    want = situation.want
    assert not want.write and want.forbidden_by == "world"
    look = [("get_order", {"order_id": situation.entity_id})]
    assert _run(retail, situation, state, look, reply="I checked: I can't cancel that order.") == 1.0
    assert _run(retail, situation, state, [], reply="I can't cancel that order.") == 0.0  # never looked
    assert _run(retail, situation, state, look, reply=None) == 0.0  # found out, never said
    assert _run(retail, situation, state, look, reply="Your order has been canceled.") == 0.0  # said the opposite


def test_a_persistent_fault_is_found_by_trying(retail: Domain) -> None:
    situation, state = _situation(retail, "get_order", tool_condition="permission_denied")
    assert not situation.want.reachable
    assert _run(retail, situation, state, []) == 0.0
    assert _run(retail, situation, state, [("get_order", {"order_id": situation.entity_id})]) == 1.0
    # The same fault met on another record says nothing about the user's (a real agent's slip: it verified a
    # different order, was refused, and told the user it could not help).
    other = next(k for k in sorted(state["order"]) if k != situation.entity_id)
    assert _run(retail, situation, state, [("get_order", {"order_id": other})],
                reply="I'm sorry, I'm not permitted to do that from here.") == 0.0
    # ...unless the user gave that number (a mistaken user): the tool is down for it too, and saying so is right.
    mistaken = dataclasses.replace(situation, phrasings=(f"Could you look up my order? The order id is {other}.",))
    assert _run(retail, mistaken, state, [("get_order", {"order_id": other})],
                reply="I'm sorry, I'm not permitted to do that from here.") == 1.0
    missing, missing_state = _situation(retail, "verify_customer", world_state="entity_missing",
                                        tool_condition="permission_denied")
    email = missing.facts.get("email", "someone@example.org")
    assert _run(retail, missing, missing_state, [("verify_customer", {"order_id": other, "email": email})],
                reply="I'm sorry, I'm not permitted to do that from here.") == 0.0


def test_an_off_topic_request_must_be_declined(retail: Domain) -> None:
    situation, state = _situation(retail, "unrelated")
    assert situation.want.kind == "none"
    assert _run(retail, situation, state, [], reply="Sorry, that's outside what I can help with.") == 1.0
    assert _run(retail, situation, state, [], reply="Sure! The capital of Australia is Canberra.") == 0.0


def test_no_tool_call_passes_only_what_the_policy_alone_decides(retail: Domain) -> None:
    state = build_state(retail, 0)
    decided = [build_situation(retail, state, _cell("unrelated"), seed=0),
               build_situation(retail, state, _cell("refund_order", rule="refund_limit"), seed=0)]
    needs_tools = [build_situation(retail, state, _cell(t, world_state=w), seed=0)
                   for t in ("get_order", "cancel_order", "refund_order")
                   for w in ("entity_exists", "entity_missing", "already_acted_on")]
    assert all(passes_without_tools(retail, s, seed=0, state=state) for s in decided)
    assert not any(passes_without_tools(retail, s, seed=0, state=state) for s in needs_tools)


def test_goal_reached_follows_the_world(retail: Domain) -> None:
    situation, state = _situation(retail, "cancel_order")
    calls = [("verify_customer", {"order_id": situation.entity_id, "email": situation.facts["email"]})]
    _, sandbox = _play(retail, situation, state, calls)
    assert not goal_reached(retail, situation, sandbox.events, sandbox.state)
    _, sandbox = _play(retail, situation, state, [*calls, ("cancel_order", {"order_id": situation.entity_id,
                                                                           "reason": situation.facts["reason"]})])
    assert goal_reached(retail, situation, sandbox.events, sandbox.state)
    missing, missing_state = _situation(retail, "cancel_order", world_state="entity_missing")
    _, sandbox = _play(retail, missing, missing_state, [("cancel_order", {"order_id": missing.entity_id,
                                                                         "reason": "x"})])
    assert not goal_reached(retail, missing, sandbox.events, sandbox.state)  # nothing to reach: the user decides


def test_a_delete_must_leave_the_record_gone(tool: Any) -> None:
    domain = infer_domain([tool("delete_file", "Delete a file.", {"file_id": {"type": "string"}}, ["file_id"]),
                           tool("get_file", "Get a file.", {"file_id": {"type": "string"}}, ["file_id"])])
    situation, state = _situation(domain, "delete_file")
    want = situation.want
    assert want.kind == "remove" and want.write
    assert _run(domain, situation, state, [("delete_file", {"file_id": situation.entity_id})]) == 1.0
    assert _run(domain, situation, state, [("get_file", {"file_id": situation.entity_id})]) == 0.0
    done, done_state = _situation(domain, "delete_file", world_state="already_acted_on")
    sandbox = Sandbox(domain, seed=0, situation=done, state=done_state)
    assert sandbox.call("delete_file", {"file_id": done.entity_id})["status"] == "already_done"


def test_the_expected_outcome_is_stored_once_and_every_grader_reads_it(pharmacy_pack: Domain, monkeypatch) -> None:
    from sim_pipeline import cover
    from sim_pipeline.axes import axis_values, validated_constraints
    from sim_pipeline.grade import conduct
    from sim_pipeline.grade.judge import case_card
    from sim_pipeline.models.sim_judge import expected_of
    from sim_pipeline.protocol.expected import Expected
    from sim_pipeline.search.situations import build_situations
    from sim_pipeline.world import oracle
    from sim_pipeline.world.reference import solve

    state = build_state(pharmacy_pack, 0)
    cells = cover.covering_array(axis_values(pharmacy_pack), seed=0, constraints=validated_constraints(pharmacy_pack))
    table = build_situations(pharmacy_pack, state, cells, seed=0, n_phrasings=1)

    def recomputed(*args, **kwargs):
        raise AssertionError("a grader recomputed the expected outcome instead of reading the stored one")

    monkeypatch.setattr(oracle, "expect", recomputed)  # from here on, nothing may work the answer out again
    for row in table.to_dict("records"):
        situation = Situation.from_row(row)
        stored = Expected.from_json(row["expected"])
        assert situation.want == stored
        reference = solve(pharmacy_pack, situation, seed=0, state=state)  # the oracle labels it too
        card = case_card(situation, list(reference.messages))
        assert dataclasses.replace(expected_of(card), rules=stored.rules) == stored
        assert [{k: v for k, v in r.items() if k != "means"} for r in card["expected"]["rules"]] == list(stored.rules)
        events = [{"tool": t, "arguments": a, "status": "ok", "entity_id": None, "turn": 2 * i + 2}
                  for i, (t, a) in enumerate(reference.calls)]
        conduct.check(list(reference.messages), events, None, pharmacy_pack, list(reference.user_events), situation.want)
    kinds = {json.loads(e)["kind"] for e in table["expected"]}
    assert {"change", "read", "none"} <= kinds
    refills = [Expected.from_json(e) for e in table["expected"] if json.loads(e)["tool"] == "refillPrescription"]
    assert refills and all([t["kind"] for t in e.rules] == ["verify_before", "max_calls", "eligibility"] for e in refills)
