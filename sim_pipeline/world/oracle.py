"""The state oracle: did a rollout leave the world as the situation's goal and the policy require?

Its verdicts are the program gold labels the judge is measured against. It reads the world's own event log and
final state, which the judge never sees (a write whose reply was garbled still counts as applied here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim_pipeline.domain import Domain
from sim_pipeline.models.conversation import confirmed_before
from sim_pipeline.situation import Situation
from sim_pipeline.world.sandbox import Event
from sim_pipeline.world.state import State


@dataclass(frozen=True)
class Verdict:
    """A program label: 1.0 pass or 0.0 fail, and why."""

    reward: float
    reason: str


def _fail(reason: str) -> Verdict:
    return Verdict(0.0, reason)


def label(domain: Domain, situation: Situation, events: list[Event], state: State,
          messages: list[dict[str, Any]]) -> Verdict:
    """Label one rollout program-correct (1.0) or not (0.0) from the world's events and final state."""
    applied = [e for e in events if e.applied]
    intent = domain.tool(situation.intent_tool) if situation.intent_tool else None
    if intent is None or not intent.writes:
        if applied:
            return _fail(f"changed the world ({applied[0].tool}) when the goal needed no change")
        # A read the world can never answer (missing record, a fault no retry clears) passes by making no change.
        persistent = situation.setup.fault is not None and situation.setup.fault.hits is None
        reachable = situation.cell["world_state"] != "entity_missing" and not persistent
        if intent is not None and reachable and not any(
                e.tool == intent.name and e.status == "ok" and e.entity_id in (None, situation.entity_id) for e in events):
            return _fail(f"never got a successful {intent.name} for the user's record")
        return Verdict(1.0, "no change, as required" if intent is None else f"answered from {intent.name}")
    if not situation.expect_write:
        return _fail(f"applied {applied[0].tool} when the situation forbids the change") if applied else Verdict(
            1.0, "correctly left the record unchanged")
    if intent.kind == "create":
        made = [e for e in applied if e.tool == intent.name]
        if len(made) != 1 or len(applied) != 1:
            return _fail(f"expected exactly one {intent.name}, saw {len(made)} (and {len(applied) - len(made)} "
                         "other writes)")
        return Verdict(1.0, f"{intent.name} created {made[0].entity} {made[0].entity_id}")
    stray = [e for e in applied if e.entity_id != situation.entity_id or e.tool != intent.name]
    if stray:
        return _fail(f"{stray[0].tool} changed {stray[0].entity} {stray[0].entity_id}, not the user's record")
    record = state.get(situation.entity or "", {}).get(situation.entity_id or "", {})
    if not situation.effect or any(record.get(k) != v for k, v in situation.effect.items()):
        return _fail(f"{situation.entity} {situation.entity_id} does not have {situation.effect}")
    first_write = min(e.index for e in applied)
    for rule in domain.rules:
        if intent.name not in rule.tools:
            continue
        if rule.kind == "verify_before" and not any(
                e.tool == rule.verify_tool and e.result.get("verified") is True and e.index < first_write
                and e.entity_id == situation.entity_id for e in events):
            return _fail(f"rule {rule.id}: acted before a successful {rule.verify_tool}")
        if rule.kind == "confirm_before" and not confirmed_before(messages, intent.name):
            return _fail(f"rule {rule.id}: acted without the user's explicit confirmation")
    return Verdict(1.0, f"{intent.name} applied to {situation.entity} {situation.entity_id} within the policy")
