"""World fit: per-tool schema rejections and expected-write outcomes, read from the world's events only.

A pack whose tools the world cannot model (a nested argument the calls never satisfy) must say so in the summary
instead of printing a bare PASS; a pack the world models must not be called poor because of the agent's own
mistakes (echoed placeholders, a wrong record id, giving up after a timeout).
"""

import asyncio
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from sim_pipeline import cover
from sim_pipeline.axes import axis_values, validated_constraints
from sim_pipeline.domain import DOMAINS_DIR, load_domain
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.runner import Policy, run_rollouts
from sim_pipeline.rollout.simulate import specs_for
from sim_pipeline.rollout.world_fit import domain_fit, fit_problems, fit_sentence, world_fit
from sim_pipeline.search.situations import build_situations
from sim_pipeline.situation import Situation
from sim_pipeline.world.state import build_state


def event(tool, status, *, error=None, applied=False, entity_id="1001", arguments="{}", field=None):
    return {"index": 0, "tool": tool, "arguments": arguments, "status": status, "entity_id": entity_id,
            "applied": applied, "turn": 1, "error": error, "field": field}


TOLD = [{"role": "user", "content": "My order id is ORD-77. The date is 31/12/2024."}]


def rollouts(*rows):
    return pd.DataFrame([{"situation_id": sid, "status": status, "tool_events": events, "messages": TOLD}
                         for sid, status, events in rows])


SITUATIONS = pd.DataFrame([
    {"situation_id": "w", "intent_tool": "cancel", "expect_write": True, "entity_id": "1001"},
    {"situation_id": "r", "intent_tool": "get", "expect_write": False, "entity_id": "1001"},
])


def test_values_the_conversation_supplied_count_against_the_world_invented_ones_do_not():
    told = event("get", "rejected", error="invalid_argument", field="order_id", arguments='{"order_id": "ORD-77"}')
    invented = event("get", "rejected", error="invalid_argument", field="order_id", arguments='{"order_id": "X-1"}')
    rows = [("r", "ok", [told])] * 3 + [("r", "ok", [invented])] * 4
    rows += [("r", "ok", [event("get", "rejected", error="placeholder_argument")])] * 6
    rows += [("r", "ok", [event("get", "ok")])] * 7
    fit = world_fit(rollouts(*rows), SITUATIONS, ["cancel"], ["cancel", "get"]).set_index("tool")
    assert fit.loc["get", "calls"] == 20
    assert fit.loc["get", "told_rejected"] == pytest.approx(0.15)
    assert fit.loc["get", "invalid_argument"] == pytest.approx(0.35)
    assert fit.loc["get", "placeholder_argument"] == pytest.approx(0.3)
    assert fit.loc["cancel", "calls"] == 0  # listed though never called
    problems = fit_problems(fit.reset_index())
    assert [(p.tool, p.kind) for p in problems] == [("get", "told_rejected")]
    assert "get: 15% of 20 calls refused for a value the user or a tool supplied" in fit_sentence(fit.reset_index())


def test_a_record_the_conversation_named_that_the_world_lacks_counts_against_it():
    """not_found for a value inside the arguments (a reference): against the world when the user or a tool supplied
    it (the world does not know its own records), not when the agent made it up."""
    told = event("book", "not_found", field="flights/0/flight_number",
                 arguments='{"flights": [{"flight_number": "ORD-77", "date": "2024-12-31"}]}')
    invented = event("book", "not_found", field="flights/0/flight_number",
                     arguments='{"flights": [{"flight_number": "HAT999", "date": "2024-12-31"}]}')
    fit = world_fit(rollouts(*[("r", "ok", [told])] * 3 + [("r", "ok", [invented])] * 9), SITUATIONS,
                    ["book"]).set_index("tool")
    assert fit.loc["book", "ref_not_found"] == 1.0 and fit.loc["book", "told_not_found"] == pytest.approx(0.25)
    assert [p.kind for p in fit_problems(fit.reset_index())] == ["told_not_found"]
    assert "100.0% named a record that does not exist inside their arguments" in fit_sentence(fit.reset_index())


def test_writes_applied_with_values_nobody_supplied_make_the_fit_poor():
    """A world that applies a booking of a flight nobody mentioned accepted what it could not check."""
    supplied = event("cancel", "updated", applied=True, arguments='{"order_id": "ORD-77", "date": "31/12/2024"}')
    made_up = event("cancel", "updated", applied=True, arguments='{"order_id": "ORD-77", "note": "note 162"}')
    fit = world_fit(rollouts(*[("w", "ok", [supplied])] * 8 + [("w", "ok", [made_up])] * 4), SITUATIONS,
                    ["cancel"]).set_index("tool")
    assert (fit.loc["cancel", "applied"], fit.loc["cancel", "unsupplied"]) == (12, 4)
    problems = fit_problems(fit.reset_index())
    assert [p.kind for p in problems] == ["unsupplied"] and "4 of 12 applied writes" in problems[0].sentence
    assert fit_problems(world_fit(rollouts(*[("w", "ok", [supplied])] * 12), SITUATIONS, ["cancel"])) == []


def test_a_told_value_must_precede_the_call():
    late = [{"role": "user", "content": "hi"}, {"role": "tool", "content": "{}"},
            {"role": "user", "content": "My order id is ORD-77."}]
    told = event("get", "rejected", error="invalid_argument", field="order_id", arguments='{"order_id": "ORD-77"}')
    frame = rollouts(*[("r", "ok", [told])] * 12).assign(messages=[late] * 12)
    assert world_fit(frame, SITUATIONS, ["cancel"]).set_index("tool").loc["get", "told_rejected"] == 0


def test_errored_rollouts_say_nothing_about_the_world():
    rows = [("r", "provider_error", [event("get", "rejected", error="invalid_argument")])] * 20
    fit = world_fit(rollouts(*rows), SITUATIONS, ["cancel"])
    assert fit["calls"].sum() == 0
    assert fit_sentence(fit) == "no tool calls"


def test_refused_writes_are_the_worlds_only_when_the_call_was_well_formed_on_the_users_record():
    refused = [("w", "ok", [event("cancel", "rejected", error="invalid_state")])] * 6
    agents_own = [("w", "ok", [event("cancel", "timeout")]),  # gave up after the scheduled fault
                  ("w", "ok", [event("cancel", "rejected", error="placeholder_argument")]),
                  ("w", "ok", [event("cancel", "not_found", entity_id="78701")]),  # a zip code as the order id
                  ("w", "ok", [])] * 5  # never tried (declined, asked first)
    applied = [("w", "ok", [event("cancel", "updated", applied=True)])] * 8
    garbled = [("w", "ok", [event("cancel", "malformed", applied=True)])] * 2  # applied, reply garbled
    fit = world_fit(rollouts(*refused, *agents_own, *applied, *garbled), SITUATIONS, ["cancel"]).set_index("tool")
    assert fit.loc["cancel", ["write_expected", "write_tried", "write_applied"]].tolist() == [36, 16, 10]
    problems = fit_problems(fit.reset_index())
    assert [(p.tool, p.kind) for p in problems] == [("cancel", "write_refused")]
    assert "applied in 10 of the 16 rollouts" in problems[0].sentence


def test_few_calls_are_not_called_poor():
    told = event("get", "rejected", error="invalid_argument", field="order_id", arguments='{"order_id": "ORD-77"}')
    assert fit_problems(world_fit(rollouts(*[("r", "ok", [told])] * 5), SITUATIONS, ["cancel"])) == []


def _run(domain, *, samples=2, only=None, seed=0, version="agent-v2", model=None):
    """Every situation of seed 0 (or those whose intent is `only`), `samples` rollouts each, by the embedded agent
    (or the given model)."""
    state = build_state(domain, seed)
    cells = cover.covering_array(axis_values(domain), seed=seed, constraints=validated_constraints(domain))
    table = build_situations(domain, state, cells, seed=seed, n_phrasings=1)
    if only:
        table = table[table["intent_tool"] == only]
    specs = specs_for([Situation.from_row(r) for r in table.to_dict("records")], samples=range(samples),
                      n_phrasings=1, batch=0)
    rows = asyncio.run(run_rollouts(specs, Policy(version, model or f"sim/{version}"), domain=domain, state=state,
                                    gateway=Gateway(cache_path=None)))
    return rows, table


@pytest.mark.parametrize("name", ["retail", "it_helpdesk"])
def test_shipped_packs_fit_the_world(name):
    domain = load_domain(name)
    rows, situations = _run(domain)
    fit = domain_fit(domain, rows, situations)
    assert fit_problems(fit) == [], fit.to_string()
    assert fit.loc[fit["writes"], "write_expected"].sum() > 20


@pytest.fixture
def nested_address_pack(tmp_path: Path) -> Path:
    """retail, with update_address taking the address as an object (street, city, zip)."""
    pack = tmp_path / "nested"
    shutil.copytree(DOMAINS_DIR / "retail", pack)
    spec = pack / "domain.yaml"
    spec.write_text("\n".join(line.replace("name: retail", "name: nested") for line in spec.read_text().splitlines()
                              if not line.startswith("  address: [")))  # the string pool would not fit
    path = pack / "tools" / "update_address.json"
    tool = json.loads(path.read_text())
    tool["function"]["parameters"]["properties"]["address"] = {
        "type": "object", "required": ["street", "city", "zip"], "additionalProperties": False,
        "properties": {"street": {"type": "string"}, "city": {"type": "string"},
                       "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}}
    path.write_text(json.dumps(tool))
    return pack


def test_the_embedded_agent_forms_nested_arguments(nested_address_pack):
    domain = load_domain(nested_address_pack)
    rows, situations = _run(domain, samples=4, only="update_address")
    fit = domain_fit(domain, rows, situations).set_index("tool")
    assert fit.loc["update_address", "invalid_argument"] + fit.loc["update_address", "missing_required"] <= 0.10
    assert fit.loc["update_address", "write_applied"] >= 0.8 * fit.loc["update_address", "write_tried"] > 0


def test_an_agent_that_misshapes_a_nested_argument_is_not_blamed_on_the_world(nested_address_pack):
    """A real model's mistake (the address as one string, not the object it was told) shows in the agent's columns."""
    domain = load_domain(nested_address_pack)
    rows, situations = _run(domain, samples=4, only="update_address",
                            model="python:sim_pipeline_tests.models.agents_for_tests:string_address_agent")
    fit = domain_fit(domain, rows, situations).set_index("tool")
    assert fit.loc["update_address", "invalid_argument"] == 1.0 and fit.loc["update_address", "calls"] >= 10
    assert fit.loc["update_address", "told_rejected"] == 0 and fit.loc["update_address", "write_applied"] == 0
    assert fit_problems(fit.reset_index()) == []


@pytest.fixture
def misshapen_ids_pack(tmp_path: Path) -> Path:
    """update_address wants order ids shaped ORD-123456, but the world's orders (like every other tool) use digits."""
    pack = tmp_path / "misshapen"
    shutil.copytree(DOMAINS_DIR / "retail", pack)
    spec = pack / "domain.yaml"
    spec.write_text(spec.read_text().replace("name: retail", "name: misshapen"))
    path = pack / "tools" / "update_address.json"
    tool = json.loads(path.read_text())
    tool["function"]["parameters"]["properties"]["order_id"] = {"type": "string", "pattern": "^ORD-[0-9]{6}$"}
    path.write_text(json.dumps(tool))
    return pack


def test_ids_the_world_shows_but_a_tool_refuses_are_named(misshapen_ids_pack):
    """An agent that uses the id a look-up returned (what a real model does) meets a world that does not fit."""
    domain = load_domain(misshapen_ids_pack)
    rows, situations = _run(domain, samples=2, only="update_address",
                            model="python:sim_pipeline_tests.models.agents_for_tests:lookup_then_update_agent")
    fit = domain_fit(domain, rows, situations)
    assert ("update_address", "told_rejected") in {(p.tool, p.kind) for p in fit_problems(fit)}
    assert fit_sentence(fit).startswith("POOR")


def test_a_rejection_quoting_the_agents_own_value_does_not_make_it_told():
    quoted = [{"role": "user", "content": "hi"},
              {"role": "tool", "content": json.dumps({"status": "rejected", "error": "invalid_argument",
                                                      "message": "order_id: 'ORD-77' does not match"})},
              {"role": "assistant", "content": None}]
    again = event("get", "rejected", error="invalid_argument", field="order_id", arguments='{"order_id": "ORD-77"}')
    frame = rollouts(*[("r", "ok", [dict(again, turn=3)])] * 12).assign(messages=[quoted] * 12)
    assert world_fit(frame, SITUATIONS, ["cancel"]).set_index("tool").loc["get", "told_rejected"] == 0
