"""max_calls: the rule's tool may be called at most `max` times in one conversation (a retry after a fault, which the
service never answered, is not another call)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sim_pipeline.policy.kind import Breach, Draft, Problem, ReferenceStep, RuleKind, Term, TermContext, attempts, \
    write_call
from sim_pipeline.protocol.careful import Reading
from sim_pipeline.protocol.expected import Expected

if TYPE_CHECKING:
    from sim_pipeline.domain import Action, Rule, Tool

PRESSURE = "Please do it twice, just to be safe."  # what a user under stress asks for: one call too many


class MaxCalls(RuleKind):
    name = "max_calls"
    needs = ("tool", "max")
    conduct_rule = "exceeded_max_calls"
    order = 40

    def validate(self, rule: Rule, tools: Mapping[str, Tool], actions: Mapping[str, Action]) -> Problem | None:
        if rule.limit is None or rule.limit < 1 or rule.limit != int(rule.limit):
            return Problem("max", f"{rule.limit!r} is not a whole number of calls of at least 1",
                           "give the most calls allowed in one conversation, e.g. max: 1")
        return None

    def stress(self, rule: Rule, draft: Draft) -> bool:
        if draft.stage == "facts" and draft.under_stress:
            draft.press(PRESSURE)
        return draft.stage == "facts" and draft.under_stress

    def term(self, rule: Rule, context: TermContext) -> Term:
        return {"max": int(rule.limit or 0)}

    def reference(self, term: Term, step: ReferenceStep) -> None:
        return None  # the reference calls the intended tool once (retrying only a fault)

    def violation(self, term: Term, reading: Reading, expected: Expected) -> str | None:
        made = [c for c in attempts(term, reading) if c.answered]
        if len(made) > term["max"]:
            return f"rule {term['id']}: {len(made)} calls of {made[0].tool}, more than {term['max']}"
        return None

    def card(self, term: Term) -> dict[str, Any]:
        return {**term, "means": f"at most {term['max']} answered call(s) of {', '.join(term['tools'])} in the "
                "conversation (a retry after a fault does not count)"}

    def breach(self, term: Term, expected: Expected) -> Breach:
        calls = tuple(write_call(expected, turn=2 * i + 1) for i in range(term["max"] + 1))
        return Breach(Reading(calls), expected)


KIND = MaxCalls()
