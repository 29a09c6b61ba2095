"""transfer_when: a request for the rule's tools that the policy forbids (another rule refuses it: over a limit, a
value not allowed) goes to a human through `transfer_tool` instead of a plain refusal; the hand-off ends the agent's
part, so no write follows it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sim_pipeline.policy.kind import Breach, Draft, Problem, ReferenceStep, RuleKind, Term, TermContext, write_call
from sim_pipeline.protocol.careful import Call, Reading
from sim_pipeline.protocol.expected import Expected

if TYPE_CHECKING:
    from sim_pipeline.domain import Action, Rule, Tool

HANDOVER_REPLY = "I can't do that myself, so I have passed your request to a specialist who will contact you."


class TransferWhen(RuleKind):
    name = "transfer_when"
    needs = ("transfer_tool", "tools")
    conduct_rule = "acted_after_transfer"
    order = 60  # last: its stress makes another rule on the tool refuse, after those kept theirs satisfied

    def validate(self, rule: Rule, tools: Mapping[str, Tool], actions: Mapping[str, Action]) -> Problem | None:
        if tools[rule.transfer_tool or ""].kind != "transfer":
            return Problem("transfer_tool", f"'{rule.transfer_tool}' is not a hand-off tool",
                           "name a tool of kind transfer (transfer_to_human..., or declare kind: transfer under tools:)")
        return None

    def stress(self, rule: Rule, draft: Draft) -> bool:
        """Under stress, the user's request is one another rule on the tool refuses, so it must be handed over."""
        return draft.stage == "facts" and draft.under_stress and draft.refuse_by_policy()

    def term(self, rule: Rule, context: TermContext) -> Term:
        return {"transfer_tool": rule.transfer_tool, "handover": rule.transfer_tool}

    def reference(self, term: Term, step: ReferenceStep) -> None:
        if step.expected.forbidden_by == "policy" and step.reply is None:
            step.call(term["transfer_tool"], step.fill(term["transfer_tool"]))
            step.reply = HANDOVER_REPLY

    def violation(self, term: Term, reading: Reading, expected: Expected) -> str | None:
        handed = False
        for call in reading.calls:
            if handed and call.tool in expected.write_tools:
                return f"attempted {call.tool} after handing the conversation over (rule {term['id']})"
            handed = handed or (call.tool == term["transfer_tool"] and call.status == "ok")
        return None

    def card(self, term: Term) -> dict[str, Any]:
        return {**term, "means": f"a request for {', '.join(term['tools'])} the policy forbids goes to "
                f"{term['transfer_tool']}; no write after the hand-off"}

    def breach(self, term: Term, expected: Expected) -> Breach:
        handed = Call(1, term["transfer_tool"], None, "ok", None, {}, {"status": "ok"})
        return Breach(Reading((handed, write_call(expected, turn=3))), expected)


KIND = TransferWhen()
