"""The state oracle: creates, the same record verified and changed, argument limits, reads, deletes."""

import json
from typing import Any

from sim_pipeline.domain import Domain
from sim_pipeline.search.situations import build_situation
from sim_pipeline.situation import Situation
from sim_pipeline.world.infer import infer_domain
from sim_pipeline.world.oracle import expectation, label
from sim_pipeline.world.sandbox import Sandbox
from sim_pipeline.world.state import build_state

YES = [{"role": "assistant", "content": "To confirm: shall I go ahead?"}, {"role": "user", "content": "Yes, go ahead."}]


def _cell(tool: str, world_state: str = "entity_exists", rule: str = "unspecified") -> dict[str, str]:
    return {"tool": tool, "rule": rule, "stance": "ordinary", "world_state": world_state,
            "tool_condition": "success", "history": "fresh"}


def _situation(domain: Domain, tool: str, **cell: str) -> tuple[Situation, Any]:
    state = build_state(domain, 0)
    return build_situation(domain, state, _cell(tool, **cell), seed=0), state


def _call(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def _run(domain: Domain, situation: Situation, state: Any, calls: list[tuple[str, dict[str, Any]]],
         confirm: bool = True) -> float:
    sandbox = Sandbox(domain, seed=0, situation=situation, state=state)
    messages = list(YES) if confirm else []
    for name, args in calls:
        messages.append(_call(name, args))
        sandbox.call(name, args)
    return label(domain, situation, sandbox.events, sandbox.snapshot(), messages).reward


def test_a_create_passes_only_with_the_users_values_and_only_once(helpdesk: Domain) -> None:
    situation, state = _situation(helpdesk, "create_ticket")
    assert expectation(helpdesk, situation).kind == "new"
    args = {k: situation.facts[k] for k in ("contact_email", "category", "summary")}
    assert _run(helpdesk, situation, state, [("create_ticket", args)]) == 1.0
    other = "hardware" if args["category"] != "hardware" else "software"
    assert _run(helpdesk, situation, state, [("create_ticket", {**args, "category": other})]) == 0.0
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


def test_a_confirmation_is_needed_before_a_destructive_write(retail: Domain) -> None:
    situation, state = _situation(retail, "cancel_order")
    calls = [("verify_customer", {"order_id": situation.entity_id, "email": situation.facts["email"]}),
             ("cancel_order", {"order_id": situation.entity_id, "reason": situation.facts["reason"]})]
    assert _run(retail, situation, state, calls, confirm=True) == 1.0
    assert _run(retail, situation, state, calls, confirm=False) == 0.0


def test_refunds_stay_within_the_limit_and_the_users_amount(retail: Domain) -> None:
    situation, state = _situation(retail, "refund_order")  # the limit does not bind: the user's amount is under it
    assert situation.expect_write and float(situation.facts["amount"]) <= 500
    verify = ("verify_customer", {"order_id": situation.entity_id, "email": situation.facts["email"]})
    right = ("refund_order", {"order_id": situation.entity_id, "amount": float(situation.facts["amount"])})
    assert _run(retail, situation, state, [verify, right]) == 1.0
    over = ("refund_order", {"order_id": situation.entity_id, "amount": 900.0})
    assert _run(retail, situation, state, [verify, over]) == 0.0
    bound, bound_state = _situation(retail, "refund_order", rule="refund_limit")  # over the limit: no refund
    assert not bound.expect_write
    assert _run(retail, bound, bound_state, []) == 1.0


def test_reads_must_succeed_unless_the_world_cannot_answer(retail: Domain) -> None:
    situation, state = _situation(retail, "get_order")
    assert _run(retail, situation, state, []) == 0.0
    assert _run(retail, situation, state, [("get_order", {"order_id": situation.entity_id})]) == 1.0
    missing, missing_state = _situation(retail, "get_order", world_state="entity_missing")
    assert _run(retail, missing, missing_state, []) == 1.0


def test_a_delete_must_leave_the_record_gone(tool: Any) -> None:
    domain = infer_domain([tool("delete_file", "Delete a file.", {"file_id": {"type": "string"}}, ["file_id"]),
                           tool("get_file", "Get a file.", {"file_id": {"type": "string"}}, ["file_id"])])
    situation, state = _situation(domain, "delete_file")
    want = expectation(domain, situation)
    assert want.kind == "remove" and want.write
    assert _run(domain, situation, state, [("delete_file", {"file_id": situation.entity_id})]) == 1.0
    assert _run(domain, situation, state, [("get_file", {"file_id": situation.entity_id})]) == 0.0
    done, done_state = _situation(domain, "delete_file", world_state="already_acted_on")
    sandbox = Sandbox(domain, seed=0, situation=done, state=done_state)
    assert sandbox.call("delete_file", {"file_id": done.entity_id})["status"] == "already_done"
