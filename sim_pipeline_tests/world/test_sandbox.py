"""The sandbox answers from state: statuses, rejections naming the field, writes, faults on one tool only."""

import json
from typing import Any

import pytest

from sim_pipeline.domain import Domain
from sim_pipeline.errors import WorldError
from sim_pipeline.world.options import WorldOptions
from sim_pipeline.world.sandbox import STATUSES, Fault, Sandbox, WorldSetup


def _order(sandbox: Sandbox, status: str) -> dict:
    return next(r for _, r in sorted(sandbox.state["order"].items()) if r["status"] == status)


def test_reads_agree_across_tools(retail: Domain) -> None:
    sandbox = Sandbox(retail, seed=3, setup=WorldSetup())
    order = _order(sandbox, "placed")
    one = sandbox.call("get_order", {"order_id": order["order_id"]})["order"]
    listed = sandbox.call("list_orders", {"email": order["email"]})["orders"]
    assert one in listed and len({r["email"] for r in listed}) == 1


def test_update_bumps_version_and_second_destructive_call_is_already_done(retail: Domain) -> None:
    sandbox = Sandbox(retail, seed=3, setup=WorldSetup())
    order = _order(sandbox, "processing")
    args = {"order_id": order["order_id"], "reason": "I changed my mind"}
    first = sandbox.call("cancel_order", args)
    assert first["status"] == "updated" and first["order"]["status"] == "cancelled"
    assert first["order"]["version"] == order["version"] + 1
    assert sandbox.call("cancel_order", args)["status"] == "already_done"
    assert [e.applied for e in sandbox.events] == [True, False]


def test_create_issues_a_new_id(helpdesk: Domain) -> None:
    sandbox = Sandbox(helpdesk, seed=1, setup=WorldSetup())
    before = set(sandbox.state["ticket"])
    result = sandbox.call("create_ticket", {"contact_email": "ana.silva12@proton.me", "category": "network",
                                            "summary": "the office wifi drops every hour"})
    assert result["status"] == "created"
    new_id = result["ticket"]["ticket_id"]
    assert new_id not in before and sandbox.state["ticket"][new_id]["version"] == 1
    assert sandbox.call("track_ticket", {"ticket_id": new_id})["ticket"]["summary"].startswith("the office wifi")


def test_delete_removes_and_a_second_delete_is_already_done(tool: Any) -> None:
    tools = [tool("delete_file", "Delete a file.", {"file_id": {"type": "string"}}, ["file_id"]),
             tool("get_file", "Get a file.", {"file_id": {"type": "string"}}, ["file_id"])]
    sandbox = Sandbox.from_tools(tools, seed=0, situation=None)
    file_id = min(sandbox.state["file"])
    assert sandbox.call("delete_file", {"file_id": file_id})["status"] == "deleted"
    assert file_id not in sandbox.snapshot()["file"]
    assert sandbox.call("delete_file", {"file_id": file_id})["status"] == "already_done"
    assert sandbox.call("get_file", {"file_id": file_id})["status"] == "not_found"


@pytest.mark.parametrize("args, error, field", [
    ({"order_id": "48213"}, "missing_required", "reason"),
    ({"order_id": "48213", "reason": ""}, "missing_required", "reason"),
    ({"order_id": "48-213", "reason": "late"}, "invalid_argument", "order_id"),
    ({"order_id": "48213", "reason": "late", "refund": True}, "invalid_argument", "refund"),
    ({"order_id": "48213", "reason": "<reason>"}, "placeholder_argument", "reason"),
    ({"order_id": "48213", "reason": "your reason"}, "placeholder_argument", "reason"),
    ({"order_id": "48213", "reason": "xxx"}, "placeholder_argument", "reason"),
])
def test_bad_arguments_are_rejected_naming_the_field(retail: Domain, args: dict, error: str, field: str) -> None:
    result = Sandbox(retail, seed=0, setup=WorldSetup()).call("cancel_order", args)
    assert result["status"] == "rejected" and result["error"] == error
    assert field in result["fields"] and field in result["message"]
    if error == "placeholder_argument":
        assert result["hint"] == "ask the customer for the actual value"


def test_schema_echo_values_are_refused(retail: Domain) -> None:
    sandbox = Sandbox(retail, seed=0, setup=WorldSetup())
    for email in ("user@example.com", "string", "your email", "email", "The customer's email address."):
        result = sandbox.call("list_orders", {"email": email})
        assert result["status"] == "rejected" and result["error"] in ("placeholder_argument", "invalid_argument")


def test_unknown_tool_and_bad_json_never_raise(retail: Domain) -> None:
    sandbox = Sandbox(retail, seed=0, setup=WorldSetup())
    results = [sandbox.call("fly_to_moon", {}), sandbox.call("get_order", "{not json"),
               sandbox.call("get_order", "[1, 2]"), sandbox.call("get_order", '{"order_id": NaN}'),
               sandbox.call("get_order", {"order_id": float("nan")})]
    assert [r["status"] for r in results] == ["rejected"] * 5
    assert results[0]["error"] == "unknown_tool" and "get_order" in results[0]["message"]
    assert all(r["error"] == "invalid_argument" for r in results[1:])
    json.dumps([e.result for e in sandbox.events], allow_nan=False)


def test_every_result_is_json_with_a_known_status(retail: Domain, helpdesk: Domain) -> None:
    for domain in (retail, helpdesk):
        sandbox = Sandbox(domain, seed=5)
        for tool in domain.tools:
            for args in ({}, {p: "48213" for p in tool.required}, {p: "ana.silva12@proton.me" for p in tool.required}):
                result = sandbox.call(tool.name, args)
                assert result["status"] in STATUSES
                assert json.loads(json.dumps(result, allow_nan=False)) == result


def test_fault_hits_only_the_situation_tool_and_a_retry_clears_it(retail: Domain) -> None:
    base = Sandbox(retail, seed=3, setup=WorldSetup())
    order = _order(base, "placed")
    sandbox = Sandbox(retail, seed=3, setup=WorldSetup(fault=Fault("cancel_order", "timeout", hits=1)))
    assert sandbox.call("get_order", {"order_id": order["order_id"]})["status"] == "ok"  # other tools unaffected
    args = {"order_id": order["order_id"], "reason": "too late"}
    assert sandbox.call("cancel_order", {"order_id": "bad"})["status"] == "rejected"  # a bad call uses no fault
    assert [sandbox.call("cancel_order", args)["status"] for _ in range(2)] == ["timeout", "updated"]


def test_persistent_fault_never_clears(retail: Domain) -> None:
    sandbox = Sandbox(retail, seed=3, setup=WorldSetup(fault=Fault("get_order", "permission_denied", hits=None)))
    order_id = min(sandbox.state["order"])
    assert {sandbox.call("get_order", {"order_id": order_id})["status"] for _ in range(4)} == {"permission_denied"}


def test_fault_rate_is_a_seeded_draw_per_call(retail: Domain) -> None:
    def statuses(seed: int) -> list[str]:
        sandbox = Sandbox(retail, seed=seed, setup=WorldSetup(fault=Fault("get_order", "rate_limited", None, 0.5)))
        order_id = min(sandbox.state["order"])
        return [sandbox.call("get_order", {"order_id": order_id})["status"] for _ in range(40)]

    first = statuses(11)
    assert first == statuses(11) and {"ok", "rate_limited"} == set(first)


def test_malformed_write_is_applied_behind_a_garbled_reply(retail: Domain) -> None:
    base = Sandbox(retail, seed=3, setup=WorldSetup())
    order = _order(base, "delivered")
    sandbox = Sandbox(retail, seed=3, setup=WorldSetup(fault=Fault("refund_order", "malformed_result", hits=1)))
    result = sandbox.call("refund_order", {"order_id": order["order_id"], "amount": 10.0})
    assert result["status"] == "malformed" and "raw" in result and sandbox.events[-1].applied
    assert sandbox.state["order"][order["order_id"]]["status"] == "refunded"


def test_partial_write_is_finished_by_a_retry(retail: Domain) -> None:
    base = Sandbox(retail, seed=3, setup=WorldSetup())
    order = _order(base, "placed")
    sandbox = Sandbox(retail, seed=3, setup=WorldSetup(fault=Fault("update_address", "partial_write", hits=1)))
    args = {"order_id": order["order_id"], "address": "12 Harbor Lane Portland OR 97201"}
    assert sandbox.call("update_address", args)["status"] == "partial_write"
    assert sandbox.state["order"][order["order_id"]]["pending_action"] == "update_address"
    assert sandbox.call("update_address", args)["status"] == "updated"
    assert "pending_action" not in sandbox.state["order"][order["order_id"]]


def test_stale_read_returns_the_seeded_copy(retail: Domain) -> None:
    base = Sandbox(retail, seed=3, setup=WorldSetup())
    order = _order(base, "placed")
    changed = {**order, "status": "shipped"}
    sandbox = Sandbox(retail, seed=3, state=base.state, setup=WorldSetup(
        upserts=(("order", changed),), fault=Fault("get_order", "stale_result", hits=1)))
    stale = sandbox.call("get_order", {"order_id": order["order_id"]})
    assert stale["status"] == "stale" and stale["order"]["status"] == "placed"
    assert sandbox.call("get_order", {"order_id": order["order_id"]})["order"]["status"] == "shipped"


def test_open_world_ids_exist_at_the_exists_share(retail: Domain) -> None:
    sandbox = Sandbox(retail, seed=0)
    found = [sandbox.call("get_order", {"order_id": str(i)})["status"] == "ok" for i in range(50_000, 50_400)]
    assert 0.6 < sum(found) / len(found) < 0.8  # 400 draws at 0.7: 5 standard errors either side
    closed = Sandbox(retail, seed=0, setup=WorldSetup())
    assert closed.call("get_order", {"order_id": "50000"})["status"] == "not_found"
    assert Sandbox(retail, seed=0, options=WorldOptions(exists_share=0.0)).call(
        "get_order", {"order_id": "50001"})["status"] == "not_found"


def test_bad_setup_raises_a_world_error(retail: Domain) -> None:
    with pytest.raises(WorldError, match="Fault.tool='fly'"):
        Sandbox(retail, seed=0, setup=WorldSetup(fault=Fault("fly", "timeout")))
    with pytest.raises(WorldError, match="Fault.mode='meteor'"):
        Sandbox(retail, seed=0, setup=WorldSetup(fault=Fault("get_order", "meteor")))
    with pytest.raises(WorldError, match="entity 'customer'"):
        Sandbox(retail, seed=0, setup=WorldSetup(upserts=(("customer", {"id": "1"}),)))


def test_schema_set_without_ids_works(no_id_tools: list[dict]) -> None:
    sandbox = Sandbox(no_id_tools, seed=2, setup=WorldSetup())
    sent = sandbox.call("send_message", {"to": "ana.silva12@proton.me", "body": "hello there"})
    assert sent["status"] == "created"
    assert sandbox.call("send_message", {"to": "ana.silva12@proton.me", "body": "hello there"})["status"] == "already_done"
    assert sandbox.call("list_messages", {"to": "ana.silva12@proton.me"})["count"] == 1
    assert sandbox.call("search", {"query": "refund policy"})["status"] == "ok"
    city = next(iter(sandbox.state["weather"].values()))["city"]
    assert sandbox.call("get_weather", {"city": city})["count"] >= 1
    assert sandbox.call("get_weather", {"city": "Atlantis Prime"})["count"] == 0
