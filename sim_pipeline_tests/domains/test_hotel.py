"""hotel: the fourth shipped pack (issue 28, item 8). Bookings hold a list of guests and a split payment from the
guest's own payment methods; rooms are shipped inventory (records/room.jsonl); rules read dates against the world's
clock, counts of a list and a tier table; the world computes a stay's total. Every situation is solvable, every
structured rule is under stress, and what the user is told to say always fits the tool's schema: a stress that only
a schema-invalid value could make would test validation, not the rule.
"""

import asyncio
import json
import re
from pathlib import Path

import pytest

from sim_pipeline import cover, defaults
from sim_pipeline.axes import axis_values, stress_rows, validated_constraints
from sim_pipeline.domain import load_domain
from sim_pipeline.json_schema import fits
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.policy.expression import typed
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline.search.situations import build_situation, build_situations, stressed_counts
from sim_pipeline.situation import Situation
from sim_pipeline.world.sandbox import Sandbox
from sim_pipeline.world.state import build_state

DOMAIN = load_domain("hotel")
ROOMS = Path(__file__).parents[2] / "data" / "domains" / "hotel" / "records" / "room.jsonl"


def _table(seed):
    constraints = validated_constraints(DOMAIN)
    cells = cover.covering_array(axis_values(DOMAIN), seed=seed, constraints=constraints,
                                 must_include=stress_rows(DOMAIN, constraints))
    return build_situations(DOMAIN, build_state(DOMAIN, seed), cells, seed=seed, n_phrasings=1)


@pytest.fixture(scope="module", params=[0, 1])
def table(request):
    return _table(request.param)


def test_every_situation_is_solvable_and_every_rule_is_stressed(table):
    assert table["solvable"].all(), table.loc[~table["solvable"], ["tool", "rule", "reference"]].to_string()
    structured = {rule.id for rule in DOMAIN.rules if rule.kind and rule.tools}
    counts = stressed_counts(table)
    assert {"occupancy", "split_payment", "free_cancellation"} <= structured
    assert {rule: counts.get(rule, 0) for rule in structured if counts.get(rule, 0) < defaults.RULE_STRESS_MIN_CELLS} == {}
    # Each predicate holds, and the write is expected, in as many situations: both sides of it are planned.
    for rule in (r for r in DOMAIN.rules if r.kind == "expression"):
        bound = table[table["intent_tool"].isin(rule.tools)]
        held = bound[bound["expect_write"] & ~bound["expected"].map(lambda e, r=rule.id: r in json.loads(e)["stressed"])]
        assert len(held) >= defaults.RULE_STRESS_MIN_CELLS, (rule.id, len(held))


def test_what_the_user_says_fits_the_tools_schema(table):
    """Told values (lists of guests and payments grown or cut to break a rule too) are ones the world accepts."""
    checked = 0
    for row in table.to_dict("records"):
        tool = DOMAIN.tool(row["intent_tool"]) if row["intent_tool"] else None
        if tool is None:
            continue
        props = tool.parameters.get("properties", {})
        for name, value in typed(tool, json.loads(row["facts"])).items():
            if name in props:
                assert fits(value, props[name]), (row["rule"], name, value)
                checked += 1
    assert checked > 100


def test_a_list_rule_is_stressed_by_a_count_the_schema_allows(table):
    split = table[(table["rule"] == "split_payment") & (table["intent_tool"] == "create_booking")
                  & ~table["expect_write"]]
    assert len(split)
    for facts in split["facts"]:
        payments = typed(DOMAIN.tool("create_booking"), json.loads(facts))["payments"]
        assert 2 < len(payments) <= 4  # over the rule's two, within the schema's four


def test_rooms_are_the_shipped_inventory_and_names_are_split():
    state = build_state(DOMAIN, 0)
    shipped = [json.loads(line) for line in ROOMS.read_text().splitlines() if line.strip()]
    # Every shipped room, as shipped; the world draws more only to reach its table size (data/domains/README.md).
    assert all({k: state["room"][r["room_id"]][k] for k in r} == r for r in shipped)
    assert len(state["room"]) == max(len(shipped), defaults.WORLD_RECORDS_PER_ENTITY)
    guests = [g for booking in state["booking"].values() for g in booking["guests"]]
    assert guests and all(" " not in g["first_name"] and " " not in g["last_name"] for g in guests)
    for booking in state["booking"].values():
        owner = state["guest"][booking["guest_id"]]
        mine = {m["payment_id"] for m in owner["payment_methods"]}
        assert booking["room_id"] in state["room"] and {p["payment_id"] for p in booking["payments"]} <= mine


def test_a_booking_gets_the_total_the_world_computes():
    state = build_state(DOMAIN, 0)
    situation = build_situation(DOMAIN, state, {"tool": "create_booking", "rule": "unspecified", "stance": "ordinary",
                                                "world_state": "entity_exists", "tool_condition": "success",
                                                "history": "fresh"}, seed=0)
    world = Sandbox(DOMAIN, seed=0, state=state, setup=situation.setup)
    guest_id = sorted(state["guest"])[0]
    room_id, room = sorted(state["room"].items())[0]
    method = state["guest"][guest_id]["payment_methods"][0]["payment_id"]
    made = world.call("create_booking", {
        "guest_id": guest_id, "room_id": room_id, "check_in": "2027-02-01", "nights": 3,
        "guests": [{"first_name": "Ana", "last_name": "Berg"}], "payments": [{"payment_id": method, "amount": 10}]})
    assert made["status"] == "created", made
    assert made["booking"]["total"] == pytest.approx(room["nightly_rate"] * 3)
    assert re.fullmatch(next(e.id_pattern for e in DOMAIN.entities if e.name == "booking"), made["booking"]["booking_id"])
    stranger = next(p for p in ("card_000000", "card_000001") if p != method)
    refused = world.call("create_booking", {
        "guest_id": guest_id, "room_id": room_id, "check_in": "2027-02-01", "nights": 3,
        "guests": [{"first_name": "Ana", "last_name": "Berg"}], "payments": [{"payment_id": stranger, "amount": 10}]})
    assert refused["status"] == "not_found"  # a payment method that is not the guest's


def _names_what_exists(records: dict, args: dict, booking: dict | None) -> list[str]:
    """An independent walk over a write's arguments: the guest, the room and the booking it names exist, and every
    payment id is one of the paying guest's own (the guest it names, else the booking's)."""
    bad = [f"{entity} {args[key]}" for key, entity in (("guest_id", "guest"), ("room_id", "room"),
                                                       ("booking_id", "booking"))
           if key in args and str(args[key]) not in records[entity]]
    owner = records["guest"].get(str(args.get("guest_id") or (booking or {}).get("guest_id")), {})
    own = {m["payment_id"] for m in owner.get("payment_methods", [])}
    bad += [f"payment {p.get('payment_id')}" for p in args.get("payments") or []
            if isinstance(p, dict) and p.get("payment_id") not in own]
    return bad


def test_no_applied_write_of_an_embedded_agent_names_a_record_that_does_not_exist(table):
    """Issue 28's bar on the pack: 100% of applied writes name records that exist (with the situation's own set-up)."""
    seed = int(table["seed"].iloc[0]) if "seed" in table else 0
    state = build_state(DOMAIN, seed)
    made = [Situation.from_row(r) for r in table.to_dict("records") if r["expect_write"]]
    specs = [RolloutSpec(s, 0, k) for s in made for k in range(2)]
    rows = asyncio.run(run_rollouts(specs, Policy("v2", "sim/agent-v2"), domain=DOMAIN, state=state,
                                    gateway=Gateway(fast_path=True)))
    by_id = {s.situation_id: s for s in made}
    applied, bad = 0, []
    for row in rows.to_dict("records"):
        situation = by_id[row["situation_id"]]
        records = {entity: dict(state[entity]) for entity in ("guest", "room", "booking")}
        for entity, record in situation.setup.upserts:
            key = next(e.id_argument for e in DOMAIN.entities if e.name == entity)
            records[entity][str(record[key])] = record
        for event in row["tool_events"]:
            if event["applied"]:
                args = json.loads(event["arguments"])
                booking = records["booking"].get(str(args.get("booking_id")))
                applied += 1
                bad += [(event["tool"], problem) for problem in _names_what_exists(records, args, booking)]
    assert applied >= 40 and bad == [], (applied, bad[:5])
