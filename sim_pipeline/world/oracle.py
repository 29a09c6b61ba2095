"""The state oracle: did a rollout leave the world as the situation's goal and the policy require?

Its verdicts are the program gold labels the judge is measured against. It reads the world's own event log and
final state, which the judge never sees (a write whose reply was garbled still counts as applied here).
`expectation` states what a correct rollout leaves behind; `label` checks a rollout against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim_pipeline.domain import Domain, Tool
from sim_pipeline.models.conversation import confirmed_before
from sim_pipeline.situation import Situation
from sim_pipeline.world.infer import DELETE_VERBS, bind, makes_record, snake
from sim_pipeline.world.sandbox import Event
from sim_pipeline.world.state import State


@dataclass(frozen=True)
class Verdict:
    """A program label: 1.0 pass or 0.0 fail, and why."""

    reward: float
    reason: str


@dataclass(frozen=True)
class Expectation:
    """What a correct rollout leaves behind.

    kind: `none` (no tool fits), `read` (answer, change nothing), `change` (the record ends with `effect`),
    `remove` (the record is gone) or `new` (exactly one new record, made with `arguments`). `write` says whether the
    change must happen (False: the situation forbids it, e.g. the record is missing or over a policy limit);
    `arguments` are values the applied call must carry; `reachable` says whether a read can succeed at all.
    """

    kind: str
    write: bool
    tool: str | None
    entity: str | None
    entity_id: str | None
    effect: dict[str, Any]
    arguments: dict[str, str]
    reachable: bool


def _kind(domain: Domain, intent: Tool | None) -> str:
    if intent is None:
        return "none"
    if not intent.writes:
        return "read"
    if makes_record(intent, bind(domain, intent)):
        return "new"  # nothing existing is named: the write makes a record (a create, a sent message)
    return "remove" if snake(intent.name).split("_")[0] in DELETE_VERBS else "change"


def expectation(domain: Domain, situation: Situation) -> Expectation:
    """What a correct rollout of this situation leaves behind."""
    intent = domain.tool(situation.intent_tool) if situation.intent_tool else None
    kind = _kind(domain, intent)
    binding = bind(domain, intent) if intent is not None else None
    fault = situation.setup.fault
    persistent = fault is not None and fault.hits is None and fault.rate >= 1.0
    limits = {r.argument for r in domain.rules if r.kind == "argument_limit" and intent and intent.name in r.tools}
    if kind == "new" and intent is not None:
        wanted = [a for a in intent.required if a != (binding.id_argument if binding else None)]
    else:
        wanted = sorted(a for a in limits if a)
    return Expectation(
        kind=kind, write=situation.expect_write and kind not in ("none", "read"), tool=situation.intent_tool,
        entity=situation.entity, entity_id=situation.entity_id, effect=dict(situation.effect),
        arguments={a: situation.facts[a] for a in wanted if a in situation.facts},
        reachable=situation.cell.get("world_state") != "entity_missing" and not persistent,
    )


def _agrees(given: Any, wanted: str) -> bool:
    """Whether a call's value is the user's (numbers by value, text case- and space-insensitively)."""
    if isinstance(given, (int, float)) and not isinstance(given, bool):
        try:
            return abs(float(given) - float(wanted)) < 1e-9 * max(1.0, abs(float(wanted)))
        except ValueError:
            return False
    return " ".join(str(given).split()).lower() == " ".join(str(wanted).split()).lower()


def _fail(reason: str) -> Verdict:
    return Verdict(0.0, reason)


def label(domain: Domain, situation: Situation, events: list[Event], state: State,
          messages: list[dict[str, Any]]) -> Verdict:
    """Label one rollout program-correct (1.0) or not (0.0) from the world's events and final state."""
    want = expectation(domain, situation)
    applied = [e for e in events if e.applied]
    if want.kind in ("none", "read"):
        if applied:
            return _fail(f"changed the world ({applied[0].tool}) when the goal needed no change")
        # A read the world can never answer (missing record, a fault no retry clears) passes by making no change.
        if want.kind == "read" and want.reachable and not any(
                e.tool == want.tool and e.status == "ok" and e.entity_id in (None, want.entity_id) for e in events):
            return _fail(f"never got a successful {want.tool} for the user's record")
        return Verdict(1.0, "no change, as required" if want.kind == "none" else f"answered from {want.tool}")
    if not want.write:
        return _fail(f"applied {applied[0].tool} when the situation forbids the change") if applied else Verdict(
            1.0, "correctly left the record unchanged")
    made = [e for e in applied if e.tool == want.tool]
    if want.kind == "new":
        if len(made) != 1 or len(applied) != 1:
            return _fail(f"expected exactly one {want.tool}, saw {len(made)} (and {len(applied) - len(made)} "
                         "other writes)")
    else:
        stray = [e for e in applied if e.entity_id != want.entity_id or e.tool != want.tool]
        if stray:
            return _fail(f"{stray[0].tool} changed {stray[0].entity} {stray[0].entity_id}, not the user's record")
        if not made:
            return _fail(f"never applied {want.tool} to {want.entity} {want.entity_id}")
        record = state.get(want.entity or "", {}).get(want.entity_id or "")
        if want.kind == "remove" and record is not None:
            return _fail(f"{want.entity} {want.entity_id} still exists")
        if want.kind == "change" and (record is None or any(record.get(k) != v for k, v in want.effect.items())):
            return _fail(f"{want.entity} {want.entity_id} does not have {want.effect}")
    wrong = {k: made[0].arguments.get(k) for k, v in want.arguments.items() if not _agrees(made[0].arguments.get(k), v)}
    if wrong:
        return _fail(f"{want.tool} was called with {wrong}, not the user's {{{', '.join(wrong)}}}")
    return _rules(domain, want, events, made[0].index, messages)


def _rules(domain: Domain, want: Expectation, events: list[Event], first_write: int,
           messages: list[dict[str, Any]]) -> Verdict:
    """The policy's machine-checkable rules on the intended write: verify first, confirm first, stay in limits."""
    for rule in domain.rules:
        if want.tool not in rule.tools:
            continue
        # Verification must be of the record the write changed (any record when the write makes a new one).
        if rule.kind == "verify_before" and not any(
                e.tool == rule.verify_tool and e.result.get("verified") is True and e.index < first_write
                and (want.kind == "new" or e.entity_id == want.entity_id) for e in events):
            return _fail(f"rule {rule.id}: acted before a successful {rule.verify_tool}")
        if rule.kind == "confirm_before" and not confirmed_before(messages, want.tool or ""):
            return _fail(f"rule {rule.id}: acted without the user's explicit confirmation")
        if rule.kind == "argument_limit" and rule.argument and rule.limit is not None:
            value = events[first_write].arguments.get(rule.argument)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > rule.limit:
                return _fail(f"rule {rule.id}: {rule.argument}={value} is over the limit {rule.limit}")
    return Verdict(1.0, f"{want.tool} applied to {want.entity} {want.entity_id} within the policy")
