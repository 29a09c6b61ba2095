"""eligibility: the rule's tools act only on records in the states their actions require (`actions: <tool>: requires`
in domain.yaml): a shipped order cannot be cancelled. The world refuses such a write; the agent must not try it once a
tool has shown the record's state, and must find out and tell the user."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sim_pipeline import defaults
from sim_pipeline.policy.kind import Breach, Draft, Problem, ReferenceStep, RuleKind, Term, TermContext, write_call
from sim_pipeline.protocol.careful import Reading
from sim_pipeline.protocol.expected import Expected
from sim_pipeline.protocol.statuses import UNKNOWN_VALUE

if TYPE_CHECKING:
    from sim_pipeline.domain import Action, Rule, Tool


class Eligibility(RuleKind):
    name = "eligibility"
    needs = ("tools",)
    conduct_rule = "acted_on_ineligible"
    order = 50

    def validate(self, rule: Rule, tools: Mapping[str, Tool], actions: Mapping[str, Action]) -> Problem | None:
        bare = [t for t in rule.tools if t not in actions or not actions[t].requires]
        if bare:
            return Problem("tools", f"{bare} declare no `requires` under actions, so nothing is eligible or not",
                           "give each tool an action with requires (the states it may act on)")
        return None

    def constraints(self, rule: Rule) -> tuple[dict[str, str], ...]:
        """Put under stress on an existing record, so never planned with a world state that has none to make
        ineligible (missing, already done, half done, unknown)."""
        return tuple({"rule": rule.id, "world_state": s} for s in defaults.WORLD_STATES
                     if s not in defaults.ELIGIBILITY_WORLD_STATES)

    def stress(self, rule: Rule, draft: Draft) -> bool:
        """Under stress, the user's record takes a state the action does not allow (a shipped order to cancel)."""
        if draft.stage == "facts":
            return draft.under_stress and bool(draft.notes.get("ineligible"))
        if not (draft.under_stress and draft.existing and draft.record is not None and draft.action is not None
                and draft.entity is not None and draft.cell.get("world_state") in defaults.ELIGIBILITY_WORLD_STATES):
            return False
        for key, allowed in sorted(draft.action.requires.items()):
            spec = next((f for f in draft.entity.fields if f.name == key), None)
            others = [v for v in (spec.values if spec is not None else ()) if v not in allowed]
            if others:
                draft.record[key] = draft.pick(others)
                draft.notes["ineligible"] = True  # the state forbids the write: find out and decline
                return True
        return False

    def term(self, rule: Rule, context: TermContext) -> Term:
        actions = context.domain.actions
        return {"requires": {t: {k: list(v) for k, v in actions[t].requires.items()} for t in rule.tools
                             if t in actions},
                "shown_as": list(context.result_keys),
                "id_field": context.entity.id_argument if context.entity is not None else None}

    def reference(self, term: Term, step: ReferenceStep) -> None:
        return None  # the reference tries the write and the world refuses it: it has seen nothing of the state first

    def violation(self, term: Term, reading: Reading, expected: Expected) -> str | None:
        shown: dict[str, Mapping[str, Any]] = {}  # record id -> its fields, as the last tool result showed them
        for call in reading.calls:
            requires = term["requires"].get(call.tool, {})
            for value in call.arguments.values() if requires else ():
                record = shown.get(str(value))
                bad = {k: record.get(k) for k, allowed in requires.items()  # a masked field shows no state
                       if record is not None and k in record and record.get(k) not in (*allowed, UNKNOWN_VALUE)}
                if bad:
                    return (f"attempted {call.tool} on {value} after a tool showed {bad}, which rule {term['id']} "
                            "does not allow")
            shown.update(_records(call.result, term))
        return None

    def card(self, term: Term) -> dict[str, Any]:
        return {**term, "means": "each tool acts only on records in the states listed under requires; no call once "
                "a tool result showed the record in another state"}

    def breach(self, term: Term, expected: Expected) -> Breach:
        """The write tried again after its refusal showed the record in a state the rule does not allow."""
        tool, requires = next((t, r) for t, r in term["requires"].items() if r)
        field, allowed = next(iter(sorted(requires.items())))
        record = {term["id_field"]: expected.entity_id, field: f"not {allowed[0]}"}
        refused = write_call(expected, turn=1, tool=tool, status="rejected",
                             result={"status": "rejected", "error": "invalid_state",
                                     (term["shown_as"] or ["record"])[0]: record})
        return Breach(Reading((refused, write_call(expected, turn=3, tool=tool))), expected)


def _records(result: Mapping[str, Any], term: Term) -> dict[str, Mapping[str, Any]]:
    """The records a tool result shows, by their own id: one (`{"order": {...}}`) or a list (`{"orders": [...]}`)."""
    out: dict[str, Mapping[str, Any]] = {}
    for key in term["shown_as"]:
        value = result.get(key)
        for row in [value] if isinstance(value, dict) else value if isinstance(value, list) else []:
            if isinstance(row, dict) and term["id_field"] in row:
                out[str(row[term["id_field"]])] = row
    return out


KIND = Eligibility()
