"""All six world_state values act in the world, on both packs and on a schema set with no id-like parameters.

A scripted agent plays each situation: it calls the intended tool with the user's facts (after verifying, and after
the user's recorded `confirm` decision, when the policy says so). The world must answer as the state says, and the
state oracle must pass the agent that does what the situation expects (where no write is allowed: looks the record
up and says it cannot) and fail one that writes when it should not.
"""

import json
from typing import Any

import pytest

from sim_pipeline.domain import Domain, Tool
from sim_pipeline.protocol.user_events import CONFIRM, user_event
from sim_pipeline.search.situations import build_situation
from sim_pipeline.situation import Situation
from sim_pipeline.world.infer import bind, infer_domain
from sim_pipeline.world.oracle import label
from sim_pipeline.world.sandbox import Sandbox
from sim_pipeline.world.state import build_state

WORLD_STATES = ("entity_exists", "entity_missing", "already_acted_on", "duplicate_entity", "partially_completed",
                "unknown")
# What the intended call answers, by kind of tool: a write naming a record, a write making one, a read.
CHANGE = {"entity_exists": "updated", "entity_missing": "not_found", "already_acted_on": "already_done",
          "partially_completed": "updated", "unknown": "rejected"}


def _cell(tool: str, world_state: str) -> dict[str, str]:
    return {"tool": tool, "rule": "unspecified", "stance": "ordinary", "world_state": world_state,
            "tool_condition": "success", "history": "fresh"}


def _args(tool: Tool, situation: Situation) -> dict[str, Any]:
    props = tool.parameters.get("properties", {})
    out: dict[str, Any] = {}
    for name in tool.required:
        value: Any = situation.facts[name]
        kind = props.get(name, {}).get("type")
        out[name] = float(value) if kind == "number" else int(float(value)) if kind == "integer" else value
    return out


def _reader(domain: Domain, intent: Tool) -> Tool | None:
    """A read tool of the intent's entity: what a careful agent looks the record up with before it answers."""
    entity = bind(domain, intent).entity
    return next((t for t in domain.tools if not t.writes and entity is not None and bind(domain, t).entity == entity),
                None)


def _play(domain: Domain, situation: Situation, *, write: bool) -> tuple[Sandbox, dict[str, Any], list[dict],
                                                                        list[dict]]:
    """Verify and confirm as the policy asks, then call the intent tool (a write only when `write`; otherwise look the
    record up), and end with a reply, as the runner records a conversation: (sandbox, result, messages, user_events)."""
    sandbox = Sandbox(domain, seed=situation.seed, situation=situation)
    intent = domain.tool(situation.intent_tool or "")
    messages: list[dict[str, Any]] = [{"role": "user", "content": situation.phrasings[0]}]

    def call(tool: Tool) -> dict[str, Any]:
        args = _args(tool, situation)
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{len(messages)}", "type": "function", "function": {"name": tool.name, "arguments": json.dumps(args)}}]})
        result = sandbox.call(tool.name, args)
        messages.append({"role": "tool", "content": json.dumps(result), "tool_call_id": f"c{len(messages) - 1}"})
        return result

    if intent is None:
        return sandbox, {}, messages, []
    if intent.writes and not write:
        reader = _reader(domain, intent)
        result = call(reader) if reader is not None and all(a in situation.facts for a in reader.required) else {}
        messages.append({"role": "assistant", "content": "I looked into it, and I can't make that change."})
        return sandbox, result, messages, []
    for rule in domain.rules:
        if rule.kind == "verify_before" and intent.name in rule.tools:
            verifier = domain.tool(rule.verify_tool or "")
            assert verifier is not None
            call(verifier)
    messages += [{"role": "assistant", "content": "Would you like me to proceed?"}, {"role": "user", "content": "ok"}]
    events = [user_event(len(messages) - 1, CONFIRM)]
    result = call(intent)
    messages.append({"role": "assistant", "content": "Here is the result."})
    return sandbox, result, messages, events


def _check(domain: Domain, situation: Situation) -> None:
    intent = domain.tool(situation.intent_tool or "")
    assert intent is not None
    state = situation.cell["world_state"]
    sandbox, result, messages, events = _play(domain, situation, write=True)
    kind = situation.want.kind  # read, change (a named record), new (a record made)
    if kind == "change" and bind(domain, intent).id_argument is not None:
        expected = "rejected" if state == "unknown" else CHANGE.get(state, "updated")
        assert result["status"] == expected, (intent.name, state, result)
    if state == "unknown" and intent.writes and kind == "change":
        assert result["error"] == "state_unknown"
    hidden = any(fields for _, _, fields in situation.setup.masked)  # none when the entity has only its lookup
    if state == "unknown" and hidden and not intent.writes and result["status"] == "ok" and "verified" not in result:
        assert "unknown" in json.dumps(result)  # the world cannot tell: some field reads `unknown`
    if state == "duplicate_entity" and bind(domain, intent).entity and bind(domain, intent).entity.lookup_by:
        entity = bind(domain, intent).entity
        value = situation.facts[entity.lookup_by]
        twins = [r for r in sandbox.state[entity.name].values() if str(r.get(entity.lookup_by)) == value]
        assert len(twins) >= 2 and situation.entity_id not in " ".join(situation.phrasings)
    if state == "partially_completed" and intent.writes and kind == "change":
        assert "pending_action" not in sandbox.state[situation.entity][situation.entity_id]
    verdict = label(domain, situation, sandbox.events, sandbox.snapshot(), messages, events)
    if situation.expect_write or not intent.writes:
        assert verdict.reward == 1.0, (intent.name, state, verdict, result)
    else:
        if any(e.applied for e in sandbox.events):
            assert verdict.reward == 0.0, (intent.name, state, verdict)
        idle, _, quiet, _ = _play(domain, situation, write=False)
        assert label(domain, situation, idle.events, idle.snapshot(), quiet).reward == 1.0, (intent.name, state)


@pytest.mark.parametrize("world_state", WORLD_STATES)
@pytest.mark.parametrize("pack", ["retail", "helpdesk"])
def test_world_states_on_the_packs(pack: str, world_state: str, request: pytest.FixtureRequest) -> None:
    domain: Domain = request.getfixturevalue(pack)
    state = build_state(domain, 0)
    for i, tool in enumerate(domain.tools):
        if tool.kind == "create" and world_state != "entity_exists":
            continue  # the pack's constraints forbid these cells
        _check(domain, build_situation(domain, state, _cell(tool.name, world_state), seed=0, variant=i))


@pytest.mark.parametrize("world_state", WORLD_STATES)
def test_world_states_without_id_parameters(no_id_tools: list[dict], world_state: str) -> None:
    domain = infer_domain(no_id_tools)
    state = build_state(domain, 0)
    for i, tool in enumerate(domain.tools):
        situation = build_situation(domain, state, _cell(tool.name, world_state), seed=0, variant=i)
        _check(domain, situation)
        _, result, _, _ = _play(domain, situation, write=True)
        if tool.name == "update_preferences":  # a write that finds its record by email
            expected = {**CHANGE, "duplicate_entity": "rejected"}[world_state]
            assert result["status"] == expected, (world_state, result)
        if tool.name == "send_message":  # a write that logs a new record: only an identical earlier one matters
            assert result["status"] == ("already_done" if world_state == "already_acted_on" else "created")
        if tool.name == "search":  # bound to no entity: the world state has nothing to act on
            assert result["status"] == "ok"
