"""A pack nobody here wrote: camelCase tools, ids shaped BK12345, a list of guest objects, and only tools/, a policy
and a three-line domain.yaml. The world infers its entity, draws schema-true values, every planned situation is
solvable, and an agent speaking over HTTP with its own wording gets the labels its actions earn.
"""

import asyncio
import json
import re

import jsonschema
import pytest

from sim_pipeline import cover
from sim_pipeline.axes import axis_values, validated_constraints
from sim_pipeline.domain import load_domain
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline.search.situations import build_situation, build_situations
from sim_pipeline.world.state import build_state
from sim_pipeline_tests.rollout.test_http_agent import call, say, scripted

BOOKING_ID = {"type": "string", "pattern": "^BK[0-9]{5}$"}
GUESTS = {"type": "array", "minItems": 1, "maxItems": 4, "items": {
    "type": "object", "required": ["fullName", "age"], "additionalProperties": False,
    "properties": {"fullName": {"type": "string", "minLength": 3}, "age": {"type": "integer", "minimum": 0,
                                                                          "maximum": 120}}}}


def _tool(pack, name, description, properties):
    (pack / "tools" / f"{name}.json").write_text(json.dumps({"type": "function", "function": {
        "name": name, "description": description, "parameters": {
            "type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}}}))


@pytest.fixture(scope="module")
def hotel(tmp_path_factory):
    pack = tmp_path_factory.mktemp("packs") / "hotel"
    (pack / "tools").mkdir(parents=True)
    _tool(pack, "getBooking", "Fetch a hotel booking by its reference.", {"bookingId": BOOKING_ID})
    _tool(pack, "cancelBooking", "Cancel a hotel booking.", {"bookingId": BOOKING_ID, "reason": {
        "type": "string", "enum": ["plans_changed", "found_cheaper", "other"]}})
    _tool(pack, "changeGuests", "Change the guests staying on a booking.", {"bookingId": BOOKING_ID, "guests": GUESTS})
    (pack / "policy.md").write_text("# Hotel desk\n\n- **no_guessing**: Use only booking references the guest gave.\n")
    (pack / "domain.yaml").write_text("name: hotel\ntitle: Hotel desk\nagent_role: You help hotel guests.\n")
    return load_domain(pack)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_situation_is_solvable_and_schema_true(hotel, seed):
    state = build_state(hotel, seed)
    assert all(re.fullmatch(r"BK[0-9]{5}", key) for key in state["booking"])
    table = build_situations(hotel, state, cover.covering_array(axis_values(hotel), seed=seed,
                                                                constraints=validated_constraints(hotel)),
                             seed=seed, n_phrasings=1)
    assert table["solvable"].all(), table.loc[~table["solvable"], ["tool", "reference"]].to_string()
    guests = [json.loads(f)["guests"] for f in table.loc[table["intent_tool"] == "changeGuests", "facts"]]
    assert guests
    for value in guests:
        jsonschema.validate(value, GUESTS)


def test_an_agent_with_its_own_wording_changes_the_guests(hotel, http_agent):
    state = build_state(hotel, 0)
    s = build_situation(hotel, state, {"tool": "changeGuests", "rule": "unspecified", "stance": "ordinary",
                                       "world_state": "entity_exists", "tool_condition": "success",
                                       "history": "fresh"}, seed=0)
    right = [call("changeGuests", bookingId=s.entity_id, guests=s.facts["guests"]),
             say("Sorted 👍 the guest list on your reservation now matches what you sent me.")]
    wrong = [call("changeGuests", bookingId=s.entity_id, guests=[{"fullName": "Someone Else", "age": 40}]),
             say("Sorted 👍 the guest list is updated.")]
    labels = []
    for steps in (right, wrong):
        server = http_agent(scripted({s.phrasings[0]: steps}))
        rows = asyncio.run(run_rollouts([RolloutSpec(s, 0, 0)], Policy("http", "openai/scripted-agent"),
                                        domain=hotel, state=state, gateway=Gateway()))
        server.stop()
        labels.append(rows["oracle_reward"].iloc[0])
    assert labels == [1.0, 0.0]


def test_the_rl_environment_grades_a_training_episode_in_this_pack(hotel):
    """The GRPO environment on a pack nobody here wrote: camelCase tool methods, a list of guest objects as an
    argument, the model's own wording; the right guests earn 1.0, someone else's 0.0."""
    from sim_pipeline.rollout.environment import environment_class, sandbox_reward

    state = build_state(hotel, 0)
    s = build_situation(hotel, state, {"tool": "changeGuests", "rule": "unspecified", "stance": "ordinary",
                                       "world_state": "entity_exists", "tool_condition": "success",
                                       "history": "fresh"}, seed=0)
    env_class = environment_class(hotel, gateway=Gateway(fast_path=True))
    rewards = []
    for guests in (s.facts["guests"], [{"fullName": "Someone Else", "age": 40}]):
        env = env_class()
        env.reset(situation=json.dumps(s.to_row()), phrasing_index=0)
        answer = json.loads(env.changeGuests(bookingId=s.entity_id, guests=guests))
        assert answer["status"] == "updated"  # the world applied both changes: only the oracle tells them apart
        closing = [{"role": "assistant", "content": "Sorted 👍 the guest list on your reservation is updated."}]
        rewards += sandbox_reward([closing], [env])
    assert rewards == [1.0, 0.0]
