"""The state oracle: did a rollout do what the situation needed, as the world and the user recorded it?

Its verdicts are the program gold labels the judge is measured against, so they read only structured records: the
world's own event log and final state (which the judge never sees: a write whose reply was garbled still counts as
applied here) and the user's decisions (`user_events`: a confirmation is the user's `confirm` decision, not a
phrase). The agent's wording is read only through `protocol.classify_reply`, for what nothing else records: whether
it declined, and whether it claimed success.

Passing means doing what the situation needed:
- a change the goal needs: applied to the user's record, with the right values, within the policy;
- a change nothing forbids but the world makes impossible (the record is missing, already done, ineligible,
  ambiguous, or the service keeps failing): the agent found out through the tools and then told the user,
  without claiming success;
- a change the policy alone forbids (over a limit) or a request outside every tool: the agent declined;
- a read: a successful read of the user's record, then a reply (or, when the world can never answer, the failed
  look-up and a reply).
A rollout with no tool call passes only the situations the policy alone decides (`passes_without_tools`).

Whatever the world allowed, a careful reader fails (protocol/careful.py, which the embedded judge and the
`unrequested_write` conduct rule share): a write attempt the situation did not call for (applied or refused), an
attempt of the intended write before its verification or confirmation, an approval given to a question about
another action or record, a success claim right after a failed call, and a closing that contradicts the world.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sim_pipeline import defaults, policy
from sim_pipeline.domain import Domain, Tool
from sim_pipeline.policy.kind import TermContext
from sim_pipeline.protocol.careful import Approval, Call, Reading, answered_after, closes_in_failure, closing, \
    misstated
from sim_pipeline.protocol.expected import Expected, Owner, agrees
from sim_pipeline.protocol.replies import CLAIMS_SUCCESS, REFUSES
from sim_pipeline.protocol.statuses import DISCOVERY_STATUSES, INFORMATIVE_REJECTIONS
from sim_pipeline.protocol.transcript import replied_after, replies, tool_turns, user_stated
from sim_pipeline.protocol.user_events import CONFIRM, REFUSE
from sim_pipeline.world.infer import bind, default_action, makes_record, plural
from sim_pipeline.world.sandbox import Event, Sandbox
from sim_pipeline.world.state import State, record_key

if TYPE_CHECKING:
    from sim_pipeline.situation import Situation

# What an agent that never calls a tool can say: a refusal, a question, a plain answer (the no-op floor's replies).
NO_TOOL_REPLIES = ("I'm sorry, I can't help with that.", "Could you tell me more about what you need?",
                   "Thanks for reaching out. Here is some general information about that.")


@dataclass(frozen=True)
class Verdict:
    """A program label: 1.0 pass or 0.0 fail, why, and which check failed it (a stable name, for counting kinds of
    failure without reading the reason's ids and values; empty on a pass)."""

    reward: float
    reason: str
    check: str = ""


def _kind(domain: Domain, intent: Tool | None) -> str:
    if intent is None:
        return "none"
    if not intent.writes:
        return "read"
    if makes_record(intent, bind(domain, intent)):
        return "new"  # nothing existing is named: the write makes a record (a create, a sent message)
    return "remove" if intent.kind == "delete" else "change"


def expect(domain: Domain, situation: Situation, stressed: Sequence[str] = (), state: State | None = None) -> Expected:
    """What a correct rollout of this situation does: the situation builder calls this once and stores the answer
    (`Situation.expected`); every grader reads that copy."""
    intent = domain.tool(situation.intent_tool) if situation.intent_tool else None
    kind = _kind(domain, intent)
    binding = bind(domain, intent) if intent is not None else None
    fault = situation.setup.fault
    persistent = fault is not None and fault.hits is None and fault.rate >= 1.0
    missing = situation.cell.get("world_state") == "entity_missing"
    if kind == "new" and intent is not None:
        wanted = [a for a in intent.required if a != (binding.id_argument if binding else None)]
    else:  # the values the policy limits must be the user's, not others that happen to pass, and so must those the
        # write puts on the record (a new address): another value there is another change, tried or made
        wanted = list(policy.watched_arguments(domain.rules, situation.intent_tool))
        if intent is not None and intent.writes and binding is not None:
            action = domain.actions.get(intent.name) or default_action(intent, binding.id_argument)
            wanted += [v[1:] for v in action.sets.values() if v.startswith("$") and v[1:] not in wanted]
    write = situation.expect_write and kind not in ("none", "read")
    forbidden_by = None
    if kind in ("new", "change", "remove") and not write:
        refused = policy.refusing_rule(domain.rules, situation.intent_tool, situation.facts) is not None or \
            bool(situation.notes.get("policy_refused"))
        forbidden_by = "policy" if refused else "world"
    entity = next((e for e in domain.entities if e.name == situation.entity), None)
    acts_on = binding.entity if binding is not None else None
    record = _record(domain, situation)
    linked = {field: found for field, target in (entity.links().items() if entity is not None else ())
              if record is not None and (found := _linked_record(domain, situation, state, target,
                                                                 record.get(field))) is not None}
    context = TermContext(domain, intent, acts_on, (acts_on.name, plural(acts_on.name)) if acts_on is not None else (),
                          record=record, linked=linked, now=defaults.WORLD_NOW) if intent is not None else None
    rules = policy.terms(domain.rules, context) if context is not None else ()
    handover = next((t["handover"] for t in rules if t.get("handover")), None) if forbidden_by == "policy" else None
    return Expected(
        kind=kind, write=write, tool=situation.intent_tool, entity=situation.entity, entity_id=situation.entity_id,
        id_argument=entity.id_argument if entity else None, effect=dict(situation.effect),
        arguments={a: situation.facts[a] for a in wanted if a in situation.facts},
        reachable=not missing and not persistent, forbidden_by=forbidden_by, missing=missing,
        write_tools=tuple(sorted(t.name for t in domain.tools if t.writes)), owners=_owners(domain, situation),
        rules=rules, handover_tool=handover if handover and domain.tool(handover) is not None else None,
        stressed=tuple(stressed),
    )


def _linked_record(domain: Domain, situation: Situation, state: State | None, target: str, key: Any) -> Any:
    """A record the user's record links to, as the situation sets it up (its own copy first, else the world's)."""
    entity = next((e for e in domain.entities if e.name == target), None)
    own = next((dict(r) for name, r in situation.setup.upserts if entity is not None and name == target
                and str(r.get(entity.id_argument)) == str(key)), None)
    return own if own is not None else (state or {}).get(target, {}).get(str(key))


def _record(domain: Domain, situation: Situation) -> dict[str, Any] | None:
    """The user's record as the situation sets it up in the world (None: it does not exist, or none is named)."""
    entity = next((e for e in domain.entities if e.name == situation.entity), None)
    return next((dict(r) for name, r in situation.setup.upserts if entity is not None and name == entity.name
                 and str(r.get(entity.id_argument)) == situation.entity_id), None)


def _owners(domain: Domain, situation: Situation) -> tuple[Owner, ...]:
    """The records the situation's record links to (an order's customer): verifying one of them verifies the user."""
    entity = next((e for e in domain.entities if e.name == situation.entity), None)
    if entity is None:
        return ()
    record = _record(domain, situation)
    targets = {e.name: e for e in domain.entities}
    return tuple(Owner(target, targets[target].id_argument, str(record[field]))
                 for field, target in sorted(entity.links().items())
                 if record is not None and record.get(field) is not None and target in targets)


def _fail(check: str, reason: str) -> Verdict:
    return Verdict(0.0, reason, check)


def _about(event: Event, want: Expected) -> bool:
    """Whether a call concerned the user's record (or looked it up: a lookup names no id)."""
    return event.entity == want.entity and event.entity_id in (None, want.entity_id)


def _informative(event: Event) -> bool:
    """Whether the world's answer tells the agent something about the record: a read that shows it, a refusal that
    says why (missing, already done, ineligible, ambiguous), a fault; not a verification, not bad arguments."""
    if event.status == "ok":
        return "verified" not in event.result
    return event.status != "rejected" or event.result.get("error") in INFORMATIVE_REJECTIONS


def _told_honestly(said: list[tuple[int, str, frozenset[str]]], turn: int) -> bool:
    """The agent wrote to the user after a message index, and nothing it wrote since claims success."""
    after = [labels for i, _, labels in said if i > turn]
    return bool(after) and not any(CLAIMS_SUCCESS in labels for labels in after)


def _declined(messages: Sequence[Mapping[str, Any]]) -> bool:
    return any(REFUSES in labels for _, _, labels in replies(messages))


def _found_out_and_told(domain: Domain, want: Expected, events: list[Event], turns: list[int],
                        messages: Sequence[Mapping[str, Any]]) -> bool:
    """A tool result about the user's record showed why nothing can change, and a reply after it said so honestly."""
    said = replies(messages)
    for event, turn in zip(events, turns):
        # The requested tool failing counts on the user's record, on a call that names none, or on the id the user
        # gave (a mistaken user's wrong number): a refusal on a record the agent picked itself says nothing about
        # why the user's request cannot be done.
        named = named_record(domain, event.tool, event.arguments, event.entity_id)
        discovered = _about(event, want) and _informative(event) or (
            event.tool == want.tool and event.status in DISCOVERY_STATUSES
            and (named in (None, want.entity_id) or user_stated(messages, turn, named)))
        if discovered and _told_honestly(said, turn):
            return True
    return False


def named_record(domain: Domain, tool_name: str, arguments: Mapping[str, Any], entity_id: str | None) -> str | None:
    """The id of the record a call names: the world's own reading (`entity_id`), or the tool's id argument when the
    world refused the call before reading it (a schema rejection, a fault)."""
    if entity_id is not None:
        return entity_id
    tool = domain.tool(tool_name)
    id_argument = bind(domain, tool).id_argument if tool is not None else None
    return record_key(arguments[id_argument]) if id_argument in arguments else None


def approvals(user_events: Sequence[Mapping[str, Any]]) -> list[Approval]:
    """The user's recorded decisions on approval questions."""
    return [Approval(int(e["turn"]), e["decision"] == CONFIRM) for e in user_events
            if e["decision"] in (CONFIRM, REFUSE)]


def reading(domain: Domain, want: Expected, events: list[Event], messages: Sequence[Mapping[str, Any]],
            user_events: Sequence[Mapping[str, Any]] = (), state: State | None = None) -> Reading:
    """The world's events and the user's decisions as every grader reads a rollout (protocol.careful.Reading)."""
    turns = tool_turns(messages)
    calls = tuple(Call(turns[e.index] if e.index < len(turns) else len(messages),  # a result never recorded
                       e.tool, named_record(domain, e.tool, e.arguments, e.entity_id), e.status, e.entity,
                       e.arguments, e.result) for e in events)
    ids = frozenset(state.get(want.entity or "", {})) if state is not None and want.record is not None else frozenset()
    return Reading(calls, tuple(approvals(user_events)), tuple(messages), ids, handoff_tools(domain))


def handoff_tools(domain: Domain) -> frozenset[str]:
    """The domain's tools that hand the user to a person (declared or guessed kind `transfer`)."""
    return frozenset(t.name for t in domain.tools if t.kind == "transfer")


def _object(value: Any) -> dict[str, Any]:
    """JSON text (a call's arguments, a tool message's content) or an already parsed object, as an object."""
    if isinstance(value, str) or value is None:
        try:
            value = json.loads(value or "{}")
        except (TypeError, ValueError):
            return {}
    return value if isinstance(value, dict) else {}


def row_reading(domain: Domain, events: Sequence[Mapping[str, Any]], messages: Sequence[Mapping[str, Any]],
                user_events: Sequence[Mapping[str, Any]] = ()) -> Reading:
    """A rollout row's recorded events (`tool_events`) as every grader reads them: each with the result the agent saw
    (the tool message at its turn, which is what the world logged) and the entity its tool acts on."""
    calls = []
    for e in events:
        turn = int(e["turn"]) if e.get("turn") is not None else len(messages)
        arguments = _object(e.get("arguments"))
        tool = domain.tool(e["tool"])
        acts_on = bind(domain, tool).entity if tool is not None and e.get("entity_id") is not None else None
        result = _object(messages[turn].get("content")) if turn < len(messages) else {}
        calls.append(Call(turn, e["tool"], named_record(domain, e["tool"], arguments, e.get("entity_id")), e["status"],
                          acts_on.name if acts_on is not None else None, arguments, result))
    return Reading(tuple(calls), tuple(approvals(user_events)), tuple(messages), handoff_tools=handoff_tools(domain))


def label(domain: Domain, situation: Situation, events: list[Event], state: State,
          messages: Sequence[Mapping[str, Any]], user_events: Sequence[Mapping[str, Any]] = ()) -> Verdict:
    """Label one rollout program-correct (1.0) or not (0.0) from the world's events and state and the user's decisions."""
    want = situation.want
    applied = [e for e in events if e.applied]
    turns = tool_turns(messages)
    # What fails whatever the world allowed: a write not called for, a rule of the situation broken (one before its
    # verification or confirmation, a value over a limit...), a confirmation of another action, a success claim right
    # after a failed call.
    careless = policy.careless_finding(reading(domain, want, events, messages, user_events, state), want)
    if careless is not None:
        return _fail(*careless)
    if want.kind in ("none", "read") or not want.write:
        if applied:
            return _fail("changed_world",
                         f"changed the world ({applied[0].tool}) when the situation allows no change")
        if want.handover_tool is not None:
            for event, turn in zip(events, turns):
                if event.tool == want.handover_tool and event.status == "ok" and replied_after(messages, turn):
                    return Verdict(1.0, f"handed a request the policy does not allow to {want.handover_tool}")
            rule = next((t["id"] for t in want.rules if t.get("handover") == want.handover_tool), "")
            return _fail("never_handed_over",
                         f"rule {rule}: never handed the request the policy does not allow to {want.handover_tool}")
        if want.kind == "none" or want.forbidden_by == "policy":
            if CLAIMS_SUCCESS in closing(messages):
                return _fail("claimed_nothing_changed", "closed claiming success although nothing was changed")
            if _declined(messages):
                return Verdict(1.0, "declined a request the policy does not allow")
            return _fail("never_declined", "never declined a request the policy does not allow")
        if want.kind == "read" and want.reachable:
            for event, turn in zip(events, turns):
                if event.tool == want.tool and event.status == "ok" and event.entity_id in (None, want.entity_id) \
                        and answered_after(messages, turn):
                    return Verdict(1.0, f"answered from {want.tool}")
            return _fail("never_answered", f"never answered from a successful {want.tool} of the user's record "
                         "(a reply after it that only asks answers nothing)")
        if _found_out_and_told(domain, want, events, turns, messages):
            return Verdict(1.0, "found out through the tools why nothing can change, and told the user")
        return _fail("never_found_out",
                     "never found out through the tools why nothing can change (or never told the user)")
    made = [e for e in applied if e.tool == want.tool]
    if want.kind == "new":
        if len(made) != 1 or len(applied) != 1:
            return _fail("not_exactly_one", f"expected exactly one {want.tool}, saw {len(made)} (and "
                         f"{len(applied) - len(made)} other writes)")
    else:
        stray = [e for e in applied if e.entity_id != want.entity_id or e.tool != want.tool]
        if stray:
            return _fail("changed_other_record",
                         f"{stray[0].tool} changed {stray[0].entity} {stray[0].entity_id}, not the user's record")
        if not made:
            return _fail("never_applied", f"never applied {want.tool} to {want.entity} {want.entity_id}")
        record = state.get(want.entity or "", {}).get(want.entity_id or "")
        if want.kind == "remove" and record is not None:
            return _fail("still_exists", f"{want.entity} {want.entity_id} still exists")
        if want.kind == "change" and (record is None or any(record.get(k) != v for k, v in want.effect.items())):
            return _fail("effect_missing", f"{want.entity} {want.entity_id} does not have {want.effect}")
    wrong = {k: made[0].arguments.get(k) for k, v in want.arguments.items() if not agrees(made[0].arguments.get(k), v)}
    if wrong:
        return _fail("other_value_applied",
                     f"{want.tool} was called with {wrong}, not the user's {({k: want.arguments[k] for k in wrong})}")
    write_turn = turns[made[0].index] if made[0].index < len(turns) else len(messages)
    if not replied_after(messages, write_turn):
        return _fail("never_told", f"never told the user after {want.tool} was applied")
    if closes_in_failure(messages):
        return _fail("closed_in_failure",
                     f"closed saying the request could not be done, although {want.tool} was applied")
    misquoted = misstated(messages, write_turn, made[0].result.get("computed") or {})
    if misquoted is not None:  # the world worked out a price or a balance, and the agent told the user another
        return _fail("misstated", misquoted)
    return Verdict(1.0, f"{want.tool} applied to {want.entity} {want.entity_id} within the policy")


def fails_whatever_said(want: Expected, events: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the world's events alone fail the situation, whatever the agent said: `label` then fails before it
    reads any reply, so the label holds for the same events under any other closing (the judge's counterfactual
    probes rely on this).

    A change the situation allows no change for was applied; a hand-off the policy asks for never went through, or a
    read the world can answer never succeeded; or the change it needs was never applied (for a record it makes: not
    exactly once, alone), or a write was applied to another record or by another tool. `events` are the rollout row's
    records (`tool`, `status`, `entity_id`, `applied`): the world's own log, never the transcript.
    """
    applied = [e for e in events if e.get("applied")]
    if want.kind in ("none", "read") or not want.write:
        if applied:
            return True
        if want.handover_tool is not None:
            return not any(e.get("tool") == want.handover_tool and e.get("status") == "ok" for e in events)
        if want.kind == "read" and want.reachable:
            return not any(e.get("tool") == want.tool and e.get("status") == "ok"
                           and e.get("entity_id") in (None, want.entity_id) for e in events)
        return False  # a decline or a finding-out: what was said decides
    made = [e for e in applied if e.get("tool") == want.tool]
    if want.kind == "new":
        return len(made) != 1 or len(applied) != 1
    return not made or any(e.get("tool") != want.tool or e.get("entity_id") != want.entity_id for e in applied)


def goal_reached(domain: Domain, situation: Situation, events: list[Event], state: State) -> bool:
    """Whether the world shows the user's goal met: the change made to their record, or their record read.

    The runner ends a conversation here once the agent has replied (a user whose goal is met has no reason to stay).
    Situations where no change is possible never reach it: the user decides when to leave.
    """
    want = situation.want
    if want.kind == "read":
        return any(e.tool == want.tool and e.status == "ok" and e.entity_id in (None, want.entity_id) for e in events)
    if not want.write:
        return False
    made = [e for e in events if e.applied and e.tool == want.tool]
    if want.kind == "new":
        return bool(made)
    record = state.get(want.entity or "", {}).get(want.entity_id or "")
    if want.kind == "remove":
        return bool(made) and record is None
    return bool(made) and record is not None and all(record.get(k) == v for k, v in want.effect.items())


def passes_without_tools(domain: Domain, situation: Situation, *, seed: int, state: State) -> bool:
    """Whether some reply with no tool call passes this situation: the policy alone decides it.

    The no-op floor of a split is the share of its situations for which this holds: the pass@1 of an agent that
    only ever replies, which a real score must clear.
    """
    world = Sandbox(domain, seed=seed, setup=situation.setup, state=state).snapshot()
    opening = situation.phrasings[0] if situation.phrasings else ""
    for reply in NO_TOOL_REPLIES:
        messages = [{"role": "user", "content": opening}, {"role": "assistant", "content": reply}]
        if label(domain, situation, [], world, messages).reward >= 1.0:
            return True
    return False
