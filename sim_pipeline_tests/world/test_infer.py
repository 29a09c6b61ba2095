"""Entities inferred from bare schemas: id arguments, names, lookups, kinds; bad schemas fail clearly."""

from typing import Any

import pytest

from sim_pipeline.domain import Domain
from sim_pipeline.errors import WorldError
from sim_pipeline.world.infer import bind, infer_domain, makes_record, past_tense, plural, singular

ID = {"type": "string", "pattern": "^[0-9]{4,6}$"}


def test_packs_bind_as_their_domain_yaml_says(retail: Domain, helpdesk: Domain) -> None:
    for domain in (retail, helpdesk):
        inferred = infer_domain(domain.tool_schemas)
        for tool in domain.tools:
            ours, theirs = bind(inferred, tool), bind(domain, tool)
            assert (ours.entity.name, ours.id_argument) == (theirs.entity.name, theirs.id_argument), tool.name
        assert {e.name: e.lookup_by for e in inferred.entities} == {e.name: e.lookup_by for e in domain.entities}


def test_id_arguments_names_and_aliases(tool: Any) -> None:
    domain = infer_domain([
        tool("get_user", "Get a user.", {"id": {"type": "integer"}}, ["id"]),
        tool("cancel_order", "Cancel.", {"order_id": ID, "userId": {"type": "integer"}}, ["order_id", "userId"]),
        tool("list_orders_by_email", "Orders of an email.", {"email": {"type": "string", "format": "email"}}, ["email"]),
        tool("add_note", "Note on an order.", {"order_id": ID, "text": {"type": "string"}}, ["order_id", "text"]),
        tool("search", "Search everything.", {"query": {"type": "string"}}, ["query"]),
    ])
    by_tool = {t.name: bind(domain, t) for t in domain.tools}
    assert (by_tool["get_user"].entity.name, by_tool["get_user"].id_argument) == ("user", "id")
    assert (by_tool["cancel_order"].entity.name, by_tool["cancel_order"].id_argument) == ("order", "order_id")
    assert by_tool["list_orders_by_email"].entity.name == "order" and by_tool["list_orders_by_email"].id_argument is None
    assert by_tool["add_note"].entity.name == "note" and makes_record(domain.tool("add_note"), by_tool["add_note"])
    assert by_tool["search"].entity is None
    order = next(e for e in domain.entities if e.name == "order")
    assert order.lookup_by == "email" and domain.id_schemas["user"] == {"type": "integer"}


def test_field_kinds_follow_the_schema(tool: Any) -> None:
    domain = infer_domain([tool("create_booking", "Book.", {
        "guest_email": {"type": "string", "format": "email"}, "nights": {"type": "integer", "minimum": 1},
        "rate": {"type": "number"}, "kind": {"enum": ["single", "double"]}, "arrive": {"type": "string",
        "format": "date"}, "code": {"type": "string", "pattern": "^[A-Z]{2}$"}, "extras": {"type": "array",
        "items": {"type": "string"}}, "vip": {"type": "boolean"}}, ["guest_email"])])
    kinds = {f.name: f.kind for f in domain.entities[0].fields}
    assert kinds == {"guest_email": "email", "nights": "integer", "rate": "money", "kind": "enum", "arrive": "date",
                     "code": "pattern", "extras": "schema", "vip": "enum"}
    assert domain.entities[0].lookup_by == "guest_email" and "booking" in domain.synthetic


@pytest.mark.parametrize("tools, match", [
    ([{"function": {"name": "bad name!"}}], "not a function name"),
    ([{"name": "a", "parameters": {"type": "object"}}, {"name": "a"}], "second tool named 'a'"),
    ([{"name": "a", "parameters": {"type": "object", "required": "x"}}], "not a valid JSON Schema"),
    ([{"name": "a", "parameters": {"type": "string"}}], "must be an object schema"),
    ([{"name": "a", "parameters": {"type": "object", "default": float("nan")}}], "not JSON"),
    ([{"name": "a", "parameters": {"type": "object", "properties": {"pin": {"type": "string", "pattern": r"^(\d)\1$"}}}}],
     r"tool 'a': field 'parameters/properties/pin/pattern': .*cannot be matched in linear time.*Fix: rewrite it "
     "without backreferences"),
])
def test_bad_schemas_raise_world_errors(tools: list, match: str) -> None:
    with pytest.raises(WorldError, match=match):
        infer_domain(tools)


def test_words() -> None:
    assert [singular(w) for w in ("orders", "entries", "addresses", "status", "boxes")] == [
        "order", "entry", "address", "status", "box"]
    assert [plural(w) for w in ("order", "entry", "address")] == ["orders", "entries", "addresses"]
    assert [past_tense(v) for v in ("cancel", "close", "reset", "refund", "send", "deny")] == [
        "cancelled", "closed", "reset", "refunded", "sent", "denied"]


def test_a_field_named_after_another_entity_links_to_its_records(tool: Any) -> None:
    """Travel schemas without a domain.yaml: a reservation's `user_id` (the user entity's own id pattern) names users
    that exist, in the drawn world and in what the world lets a booking name."""
    from sim_pipeline.kind_guesses import inferred_links
    from sim_pipeline.world.sandbox import Sandbox
    from sim_pipeline.world.setup import WorldSetup
    from sim_pipeline.world.state import build_state

    user_id = {"type": "string", "pattern": "^[a-z]+_[a-z]+_[0-9]{4}$"}
    tools = [
        tool("get_user_details", "A traveller's profile.", {"user_id": user_id}, ["user_id"]),
        tool("get_reservation_details", "A booking.", {"reservation_id": {"type": "string", "pattern": "^[A-Z0-9]{6}$"}},
             ["reservation_id"]),
        tool("book_reservation", "Book a trip for a traveller.",
             {"reservation_id": {"type": "string", "pattern": "^[A-Z0-9]{6}$"}, "user_id": user_id,
              "origin": {"type": "string", "pattern": "^[A-Z]{3}$"}, "destination": {"type": "string",
                                                                                     "pattern": "^[A-Z]{3}$"}},
             ["reservation_id", "user_id", "origin", "destination"]),
    ]
    domain = infer_domain(tools, name="travel")
    reservation = next(e for e in domain.entities if e.name == "reservation")
    assert reservation.links() == {"user_id": "user"}
    assert inferred_links(domain) == ["reservation.user_id -> user"]  # what `sim-pipeline run` prints
    state = build_state(domain, 0)
    assert state["reservation"] and all(r["user_id"] in state["user"] for r in state["reservation"].values())
    closed = WorldSetup((), (), (), None)  # a rollout's world: only the seeded records exist
    sandbox = Sandbox(domain, seed=0, state=state, setup=closed)
    user = next(iter(sorted(state["user"])))
    made = sandbox.call("book_reservation", {"reservation_id": "ZZ9ZZ9", "user_id": user, "origin": "SFO",
                                             "destination": "JFK"})
    assert made["status"] == "created"
    fresh = Sandbox(domain, seed=0, state=state, setup=closed)  # the same free reservation id, for a user nobody is
    orphan = fresh.call("book_reservation", {"reservation_id": "ZZ9ZZ9", "user_id": "nobody_here_0000",
                                             "origin": "SFO", "destination": "JFK"})
    assert orphan["status"] == "not_found" and "no user with id nobody_here_0000" in orphan["message"]
