"""A reservations desk written here in another hand (modelled on a public benchmark's airline desk, in our own
shapes): users holding a list of payment methods, flights, and reservations holding lists of flights, passengers and
payments. Its references live inside nested data; the world keeps them true and refuses writes that break them, the
situations ask for real flights and the user's own payment methods, and no applied write names a record that does
not exist (issue 28, items 1 and 2)."""

import asyncio
import json
from pathlib import Path

import pytest
import yaml

from sim_pipeline import cover, defaults
from sim_pipeline.axes import axis_values, stress_rows, validated_constraints
from sim_pipeline.domain import load_domain
from sim_pipeline.errors import DomainPackError
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline.search.situations import build_situation, build_situations
from sim_pipeline.situation import Situation
from sim_pipeline.world.sandbox import Sandbox
from sim_pipeline.world.setup import WorldSetup
from sim_pipeline.world.state import build_state
from sim_pipeline_tests.world.conftest import fn

USER_ID = {"type": "string", "pattern": "^[a-z]+_[a-z]+_[0-9]{4}$", "description": "The traveller's id, e.g. mia_li_3668."}
RES_ID = {"type": "string", "pattern": "^R[A-Z0-9]{5}$", "description": "The reservation code, e.g. R4WQ2Z."}
FLIGHT_NO = {"type": "string", "pattern": "^HAT[0-9]{3}$", "description": "A flight number, e.g. HAT170."}
PAYMENT_ID = {"type": "string", "pattern": "^(card|gift|cert)_[0-9]{6}$"}
FLIGHTS = {"type": "array", "minItems": 1, "maxItems": 2, "items": {
    "type": "object", "required": ["flight_number", "date"], "additionalProperties": False,
    "properties": {"flight_number": FLIGHT_NO, "date": {"type": "string", "format": "date"}}}}
PASSENGERS = {"type": "array", "minItems": 1, "maxItems": 3, "items": {
    "type": "object", "required": ["first_name", "last_name"], "additionalProperties": False,
    "properties": {"first_name": {"type": "string", "minLength": 1}, "last_name": {"type": "string", "minLength": 1}}}}
PAYMENTS = {"type": "array", "minItems": 1, "maxItems": 2, "items": {
    "type": "object", "required": ["payment_id", "amount"], "additionalProperties": False,
    "properties": {"payment_id": PAYMENT_ID, "amount": {"type": "number", "minimum": 1}}}}
CABIN = {"enum": ["basic_economy", "economy", "business"]}
TOOLS = {
    "get_user_details": ("Look up a traveller's profile and payment methods.", {"user_id": USER_ID}),
    "get_reservation_details": ("Look up a reservation.", {"reservation_id": RES_ID}),
    "get_flight_status": ("Look up a flight's route, date and status.", {"flight_number": FLIGHT_NO}),
    "book_reservation": ("Book flights for a traveller and the passengers, paid with their payment methods.",
                         {"user_id": USER_ID, "cabin": CABIN, "flights": FLIGHTS, "passengers": PASSENGERS,
                          "payment_methods": PAYMENTS}),
    "update_reservation_flights": ("Change the flights of a reservation, paying any difference with a payment "
                                   "method of the traveller.", {"reservation_id": RES_ID, "flights": FLIGHTS,
                                                                "payment_id": PAYMENT_ID}),
    "cancel_reservation": ("Cancel a reservation.", {"reservation_id": RES_ID}),
}
SPEC = {
    "name": "reservations", "title": "Reservations desk",
    "agent_role": "You change and cancel flight reservations for the travellers of Haute Air.",
    "entities": {
        "user": {"id_argument": "user_id", "id_pattern": USER_ID["pattern"], "fields": {
            "name": {"kind": "name"}, "membership": {"kind": "enum", "values": ["regular", "silver", "gold"]},
            "born": {"kind": "date", "min": "now-90y", "max": "now-18y"},
            "payment_methods": {"kind": "list", "schema": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
                "type": "object", "required": ["payment_id", "kind"], "additionalProperties": False,
                "properties": {"payment_id": PAYMENT_ID, "kind": {"enum": ["card", "gift_card", "certificate"]}}}}}}},
        "flight": {"id_argument": "flight_number", "id_pattern": FLIGHT_NO["pattern"], "fields": {
            "origin": {"kind": "enum", "values": ["SFO", "JFK", "ORD", "SEA"]},
            "destination": {"kind": "enum", "values": ["LAX", "BOS", "MIA", "DEN"]},
            "date": {"kind": "date", "min": "now+1d", "max": "now+180d"}, "price": {"kind": "money", "min": 80,
                                                                                  "max": 900}}},
        "reservation": {"id_argument": "reservation_id", "id_pattern": RES_ID["pattern"], "fields": {
            "user_id": {"kind": "link", "entity": "user"}, "cabin": {"kind": "enum", "values": CABIN["enum"]},
            "status": {"kind": "enum", "values": ["booked", "flown"]},
            "flights": {"kind": "list"}, "passengers": {"kind": "list"}, "payment_methods": {"kind": "list"}}},
    },
    "tools": {"book_reservation": {"kind": "create", "entity": "reservation"},
              "update_reservation_flights": {"kind": "update", "entity": "reservation"}},
    "actions": {"book_reservation": {"computes": {"total": "sum(args.flights.map(f, records.flight[f.flight_number]"
                                                         ".price)) * double(size(args.passengers))"}},
                "update_reservation_flights": {"sets": {"flights": "$flights"}, "requires": {"status": ["booked"]}},
                "cancel_reservation": {"sets": {"status": "cancelled"}, "requires": {"status": ["booked"]}}},
    "references": [
        "reservation.flights[].flight_number -> flight",
        "*.payment_methods[].payment_id -> user.payment_methods[].payment_id",
        "update_reservation_flights.payment_id -> user.payment_methods[].payment_id",
    ],
    "rules": {"confirm_changes": {"kind": "confirm_before",
                                  "tools": ["book_reservation", "update_reservation_flights", "cancel_reservation"]}},
    "constraints": [{"tool": "book_reservation", "world_state": s} for s in
                    ("entity_missing", "duplicate_entity", "partially_completed", "unknown", "already_acted_on")],
}
POLICY = ("# Haute Air reservations\n\n- **confirm_changes**: Read the change back and get the traveller's yes before "
          "booking, changing or cancelling.\n")


# The desk's own flight schedule, shipped with the pack (records/flight.jsonl): the world uses it instead of drawing.
SCHEDULE = [{"flight_number": f"HAT{100 + 7 * i}", "origin": ["SFO", "JFK", "ORD", "SEA"][i % 4],
             "destination": ["LAX", "BOS", "MIA", "DEN"][i % 4], "date": f"2026-11-{10 + i:02d}", "price": 120.0 + 35 * i}
            for i in range(6)]


def write_pack(root: Path, spec: dict, records: dict[str, list] | None = None) -> Path:
    pack = root / "reservations"
    (pack / "tools").mkdir(parents=True)
    for name, (description, properties) in TOOLS.items():
        (pack / "tools" / f"{name}.json").write_text(json.dumps(fn(name, description, properties, list(properties))))
    (pack / "domain.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (pack / "policy.md").write_text(POLICY)
    (pack / "records").mkdir()
    for entity, rows in (records if records is not None else {"flight": SCHEDULE}).items():
        (pack / "records" / f"{entity}.jsonl").write_text("".join(
            (row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return pack


@pytest.fixture(scope="module")
def desk(tmp_path_factory):
    return load_domain(write_pack(tmp_path_factory.mktemp("packs"), SPEC))


@pytest.fixture(scope="module")
def world(desk):
    return build_state(desk, 0)


def names_what_exists(state, args: dict, acted_on: dict | None = None) -> list[str]:
    """An independent walk: every flight a call or record names exists, on its date, and every payment id is one of
    the traveller's own (the one its user_id names, else the reservation's)."""
    bad = []
    for i, leg in enumerate(args.get("flights") or []):
        leg = leg if isinstance(leg, dict) else {}
        flight = state["flight"].get(leg.get("flight_number"))
        if flight is None or flight["date"] != leg.get("date"):
            bad.append(f"flights/{i}: {leg}")
    user = state["user"].get(args.get("user_id") or (acted_on or {}).get("user_id"), {})
    own = {m["payment_id"] for m in user.get("payment_methods", [])}
    paid = [p.get("payment_id") for p in args.get("payment_methods") or [] if isinstance(p, dict)] + (
        [args["payment_id"]] if "payment_id" in args else [])
    bad += [f"payment {p} is not {user.get('user_id')}'s" for p in paid if p not in own]
    return bad


def test_the_desks_own_flights_are_the_worlds_and_drawn_ones_extend_them(desk, world):
    assert [world["flight"][f["flight_number"]] for f in SCHEDULE] == [{"version": 1, **f} for f in SCHEDULE]
    assert len(world["flight"]) == len(build_state(desk, 1)["flight"]) > len(SCHEDULE)  # drawn flights fill up
    assert build_state(desk, 1)["flight"]["HAT100"] == world["flight"]["HAT100"]  # the same on every seed


def test_drawn_reservations_name_real_flights_on_their_dates_and_their_travellers_own_payments(world):
    assert world["reservation"] and world["flight"]
    broken = {key: names_what_exists(world, r) for key, r in world["reservation"].items()}
    assert not any(broken.values()), {k: v for k, v in broken.items() if v}


def test_a_write_naming_anything_that_does_not_exist_is_not_found_with_its_path(desk, world):
    user = next(u for _, u in sorted(world["user"].items()))
    flight = next(f for _, f in sorted(world["flight"].items()))
    mine = user["payment_methods"][0]["payment_id"]
    someone_else = next(m["payment_id"] for _, u in sorted(world["user"].items()) if u is not user
                        for m in u["payment_methods"] if m["payment_id"] not in
                        {x["payment_id"] for x in user["payment_methods"]})
    booking = {"user_id": user["user_id"], "cabin": "economy",
               "flights": [{"flight_number": flight["flight_number"], "date": flight["date"]}],
               "passengers": [{"first_name": "Ada", "last_name": "Okafor"}],
               "payment_methods": [{"payment_id": mine, "amount": flight["price"]}]}
    closed = WorldSetup((), (), (), None)

    def book(**changes):
        return Sandbox(desk, seed=0, state=world, setup=closed).call("book_reservation", {**booking, **changes})

    assert book()["status"] == "created"
    ghost = book(flights=[{"flight_number": "HAT999", "date": flight["date"]}] if "HAT999" not in world["flight"]
                 else [{"flight_number": "HAT998", "date": flight["date"]}])
    assert ghost["status"] == "not_found" and ghost["path"] == "flights/0/flight_number"
    stolen = book(payment_methods=[{"payment_id": someone_else, "amount": 10}])
    assert stolen["status"] == "not_found" and stolen["path"] == "payment_methods/0/payment_id"
    reservation = next(r for _, r in sorted(world["reservation"].items()) if r["status"] == "booked")
    change = Sandbox(desk, seed=0, state=world, setup=closed).call("update_reservation_flights", {
        "reservation_id": reservation["reservation_id"], "flights": booking["flights"], "payment_id": someone_else})
    assert change["status"] == "not_found" and change["path"] == "payment_id"


@pytest.fixture(scope="module")
def situations(desk, world):
    cells = cover.covering_array(axis_values(desk), seed=0, constraints=validated_constraints(desk))
    table = build_situations(desk, world, cells, seed=0, n_phrasings=1)
    return table, [Situation.from_row(r) for r in table.to_dict("records")]


def test_every_situation_asks_for_real_flights_and_own_payments_and_is_solvable(desk, world, situations):
    table, made = situations
    unsolvable = table[~table["solvable"]]
    assert unsolvable.empty, unsolvable[["situation_id", "tool", "world_state", "reference"]].to_dict("records")
    writes = [s for s in made if s.intent_tool in ("book_reservation", "update_reservation_flights")]
    assert len(writes) >= 10
    for s in writes:
        if s.cell["world_state"] == "entity_missing":
            continue  # the reservation the user names does not exist: there is no traveller to pay from
        record = next((r for e, r in s.setup.upserts if e == "reservation"), None)
        assert not names_what_exists(world, s.facts, record), (s.situation_id, s.facts)


def test_no_applied_write_of_an_embedded_agent_names_a_record_that_does_not_exist(desk, world, situations):
    _, made = situations
    specs = [RolloutSpec(s, 0, k) for s in made for k in range(2)]
    rows = asyncio.run(run_rollouts(specs, Policy("v2", "sim/agent-v2"), domain=desk, state=world,
                                    gateway=Gateway(fast_path=True)))
    by_id = {s.situation_id: s for s in made}
    applied = bad = 0
    for row in rows.to_dict("records"):
        situation = by_id[row["situation_id"]]
        record = next((r for e, r in situation.setup.upserts if e == "reservation"), None)
        for event in row["tool_events"]:
            if event["applied"] and event["tool"] in ("book_reservation", "update_reservation_flights"):
                applied += 1
                bad += bool(names_what_exists(world, json.loads(event["arguments"]), record))
    assert applied >= 5 and bad == 0, (applied, bad)


@pytest.mark.parametrize(("line", "message"), [
    ("reservation.flights[].flight_number", "no '->'"),
    ("booking.flights[].flight_number -> flight", "'booking' is no entity and no tool"),
    ("reservation.legs[].flight_number -> flight", "no field or argument 'legs'"),
    ("reservation.flights[].flight_number -> plane", "'plane' is no entity"),
    ("*.payment_methods[].payment_id -> user.wallet[].payment_id", "'wallet\\[\\]' is not a field of user"),
])
def test_a_reference_that_names_nothing_is_refused_at_load(line, message, tmp_path):
    spec = json.loads(json.dumps(SPEC))
    spec["references"] = [line]
    with pytest.raises(DomainPackError, match=rf"references/0'?: .*{message}"):
        load_domain(write_pack(tmp_path, spec))


@pytest.mark.parametrize(("records", "message"), [
    ({"plane": [SCHEDULE[0]]}, r"records/plane.jsonl: file: no entity 'plane'"),
    ({"flight": ['{"flight_number": "HAT100", "origin": ']}, r"flight.jsonl: line 1: record: not JSON"),
    ({"flight": [SCHEDULE[0], {**SCHEDULE[1], "gate": "B7"}]}, r"line 2: field 'gate': not a field of flight"),
    ({"flight": [{**SCHEDULE[0], "origin": "LHR"}]}, r"line 1: field 'origin': 'LHR' is not one of"),
    ({"flight": [{**SCHEDULE[0], "date": "next tuesday"}]}, r"field 'date': 'next tuesday' is not an ISO date"),
    ({"flight": [{"origin": "SFO"}]}, r"line 1: field 'flight_number': missing"),
    ({"flight": [SCHEDULE[0], SCHEDULE[0]]}, r"line 2: field 'flight_number': 'HAT100' again \(first on line 1\)"),
    ({"flight": [{**SCHEDULE[0], "flight_number": "BA100"}]}, r"'BA100' does not match the id pattern"),
    ({"flight": SCHEDULE, "reservation": [{"reservation_id": "RABCDE", "user_id": "mia_li_3668"}]},
     r"reservation.jsonl: line 1: field 'user_id': links to user 'mia_li_3668', which no records/user.jsonl holds"),
])
def test_a_shipped_record_the_pack_cannot_hold_names_file_line_and_field(records, message, tmp_path):
    with pytest.raises(DomainPackError, match=message):
        load_domain(write_pack(tmp_path, SPEC, records))


def test_a_shipped_reference_must_name_a_shipped_record(tmp_path):
    user = {"user_id": "mia_li_3668", "name": "Mia Li", "membership": "gold",
            "payment_methods": [{"payment_id": "card_100001", "kind": "card"}]}
    booking = {"reservation_id": "RABCDE", "user_id": "mia_li_3668", "cabin": "economy", "status": "booked",
               "flights": [{"flight_number": "HAT100", "date": "2026-11-10"}],
               "passengers": [{"first_name": "Mia", "last_name": "Li"}],
               "payment_methods": [{"payment_id": "card_100001", "amount": 120.0}]}
    desk = load_domain(write_pack(tmp_path / "ok", SPEC, {"flight": SCHEDULE, "user": [user], "reservation": [booking]}))
    assert build_state(desk, 0)["reservation"]["RABCDE"]["flights"] == booking["flights"]  # kept, never re-drawn
    ghost = {**booking, "flights": [{"flight_number": "HAT999", "date": "2026-11-10"}]}
    with pytest.raises(DomainPackError, match=r"reservation.jsonl: line 1: field 'flights/0/flight_number': names no "
                                              r"flight that a records file holds"):
        load_domain(write_pack(tmp_path / "ghost", SPEC, {"flight": SCHEDULE, "user": [user], "reservation": [ghost]}))
    stolen = {**booking, "payment_methods": [{"payment_id": "card_999999", "amount": 1.0}]}
    with pytest.raises(DomainPackError, match=r"field 'payment_methods/0/payment_id': names no user"):
        load_domain(write_pack(tmp_path / "stolen", SPEC, {"flight": SCHEDULE, "user": [user],
                                                            "reservation": [stolen]}))


def test_dates_are_drawn_within_their_bounds_on_the_worlds_clock(world):
    """Travellers are adults born in the past, flights leave in the future (WORLD_NOW is 2026-11-01)."""
    born = [u["born"] for u in world["user"].values()]
    assert born and all("1936-11-13" <= b <= "2008-11-13" for b in born), (min(born), max(born))
    drawn = [f["date"] for k, f in world["flight"].items() if k not in {s["flight_number"] for s in SCHEDULE}]
    assert drawn and all("2026-11-02" <= d <= "2027-04-30" for d in drawn), (min(drawn), max(drawn))


@pytest.mark.parametrize(("bound", "message"), [
    ({"min": "next week"}, r"fields/date/min'?: 'next week' is not a date bound.*now-80y"),
    ({"min": "now+10d", "max": "now+1d"}, r"fields/date/min'?: now\+10d is after now\+1d"),
])
def test_a_date_bound_that_cannot_be_read_is_refused(bound, message, tmp_path):
    spec = json.loads(json.dumps(SPEC))
    spec["entities"]["flight"]["fields"]["date"] = {"kind": "date", **bound}
    with pytest.raises(DomainPackError, match=message):
        load_domain(write_pack(tmp_path, spec))


def test_the_world_computes_the_price_and_a_misstated_total_fails_the_oracle_and_the_judge(desk, world, situations):
    """book_reservation's total is the flights' prices times the passengers (`computes:`): the world returns it, and
    a closing that states another amount fails, while one that states it, or none, passes."""
    from sim_pipeline.grade.judge import case_card
    from sim_pipeline.models.sim_judge import outcome
    from sim_pipeline.world.oracle import label
    from sim_pipeline.world.reference import solve

    _, made = situations
    booking = next(s for s in made if s.intent_tool == "book_reservation" and s.want.write
                   and s.cell["tool_condition"] == "success")
    reference = solve(desk, booking, seed=0, state=world)
    assert reference.solvable
    created = next(json.loads(m["content"]) for m in reference.messages if m.get("role") == "tool"
                   and json.loads(m["content"]).get("status") == "created")
    legs, people = booking.facts["flights"], booking.facts["passengers"]
    total = round(sum(world["flight"][leg["flight_number"]]["price"] for leg in legs) * len(people), 2)
    assert created["computed"] == {"total": total} and created["reservation"]["total"] == total

    def closing(text):
        messages = [*reference.messages[:-1], {"role": "assistant", "content": text}]
        box = Sandbox(desk, seed=0, setup=booking.setup, state=world)
        for m in messages:
            for c in m.get("tool_calls") or []:
                box.call(c["function"]["name"], json.loads(c["function"]["arguments"]))
        verdict = label(desk, booking, box.events, box.snapshot(), messages, list(reference.user_events))
        return verdict, outcome(case_card(booking, messages))

    for text in ("All set: your trip is booked.", f"Booked! The total is ${total:,.2f}."):
        verdict, (judged, _) = closing(text)
        assert verdict.reward == 1.0 and judged == 1, (text, verdict)
    verdict, (judged, why) = closing(f"Booked! The total is ${total + 40:,.2f}.")
    assert verdict.reward == 0.0 and "where the world computed total" in verdict.reason and judged == 0, (verdict, why)


def test_a_computed_value_that_cannot_be_read_is_refused_at_load_or_makes_its_situations_unsolvable(tmp_path):
    spec = json.loads(json.dumps(SPEC))
    spec["actions"]["book_reservation"]["computes"]["total"] = "sum(args.flights.map(f, fares[f]))"
    with pytest.raises(DomainPackError, match=r"actions/book_reservation/computes/total'?: reads \['fares'\]"):
        load_domain(write_pack(tmp_path / "unknown", spec))
    # CEL does not coerce: a double times an int has no overload, which only the data shows.
    spec["actions"]["book_reservation"]["computes"]["total"] = ("sum(args.flights.map(f, records.flight["
                                                                "f.flight_number].price)) * size(args.passengers)")
    desk = load_domain(write_pack(tmp_path / "untyped", spec))
    world = build_state(desk, 0)
    cells = cover.covering_array(axis_values(desk), seed=0, constraints=validated_constraints(desk))
    table = build_situations(desk, world, cells, seed=0, n_phrasings=1)
    bookings = table[(table["intent_tool"] == "book_reservation") & table["expect_write"]]
    assert len(bookings) and not bookings["solvable"].any()
    assert bookings["reference"].str.contains("book_reservation: computes/total could not be worked out").all()


# The desk's harder rules, as expressions: a passenger cap on a booking, and a cancellation allowed within 24 hours
# of booking, or with insurance, or in business (issue 28's examples, in this pack's own shapes).
RULED = {**SPEC,
         "entities": {**SPEC["entities"], "reservation": {**SPEC["entities"]["reservation"], "fields": {
             **SPEC["entities"]["reservation"]["fields"], "booked_at": {"kind": "date", "min": "now-3d", "max": "now"},
             "insurance": {"kind": "enum", "values": ["yes", "no"]}}}},
         "rules": {**SPEC["rules"],
                   "passenger_cap": {"kind": "expression", "tools": ["book_reservation"],
                                     "when": "size(args.passengers) <= 2"},
                   "cancel_window": {"kind": "expression", "tools": ["cancel_reservation"],
                                     "when": "now - date(record.booked_at) < duration('24h') || "
                                             "record.insurance == 'yes' || record.cabin == 'business'"}}}
RULED_POLICY = POLICY + ("- **passenger_cap**: At most two passengers on one booking.\n"
                         "- **cancel_window**: A reservation may be cancelled within 24 hours of booking, or when it "
                         "is insured, or in business.\n")


@pytest.mark.parametrize("seed", [0, 1])
def test_each_predicate_is_stressed_both_ways_and_every_situation_is_solvable(seed, tmp_path):
    """Issue 28's bar on a reservations desk: each predicate is put under stress in at least RULE_STRESS_MIN_CELLS
    situations a seed (the right move: decline) and holds in as many that expect the write, all solvable."""
    pack = write_pack(tmp_path, RULED)
    (pack / "policy.md").write_text(RULED_POLICY)
    desk = load_domain(pack)
    constraints = validated_constraints(desk)
    cells = cover.covering_array(axis_values(desk), seed=seed, constraints=constraints,
                                 must_include=stress_rows(desk, constraints))
    table = build_situations(desk, build_state(desk, seed), cells, seed=seed, n_phrasings=1)
    assert table["solvable"].all(), table.loc[~table["solvable"], ["tool", "rule", "reference"]].to_dict("records")
    for rule in ("passenger_cap", "cancel_window"):
        tools = next(r.tools for r in desk.rules if r.id == rule)
        bound = table[table["intent_tool"].isin(tools)]
        stressed = bound["expected"].map(lambda e, rule=rule: rule in json.loads(e).get("stressed", []))
        assert int(stressed.sum()) >= defaults.RULE_STRESS_MIN_CELLS, (rule, int(stressed.sum()))
        assert not bound[stressed]["expect_write"].any()  # under stress the right move is to decline
        held = bound[~stressed & bound["expect_write"]]
        assert len(held) >= defaults.RULE_STRESS_MIN_CELLS, (rule, len(held))


def test_a_multi_tool_cell_never_plans_a_create_where_no_record_can_be_looked_up(desk, world):
    """No entity of this desk is looked up by another field, so a multi-tool cell falls back to any tool: never a
    create, which the world always lets through (planned with a record already acted on, no agent could pass it)."""
    cell = {"tool": "multi_tool", "rule": "unspecified", "stance": "ordinary", "world_state": "already_acted_on",
            "tool_condition": "success", "history": "fresh"}
    picked = {build_situation(desk, world, cell, seed=seed).intent_tool for seed in range(40)}
    assert picked and "book_reservation" not in picked, picked
