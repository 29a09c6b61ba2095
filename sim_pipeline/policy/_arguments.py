"""What the rule kinds on one argument's value share (argument_limit, allowed_values, forbidden_argument).

Such a rule forbids calling its tools with some values of one argument. The policy alone decides it, so a request
that needs such a value is declined (or handed over, where a transfer_when rule says so); every attempt with such a
value fails, applied or refused. In a situation the rule under stress gets a forbidden value, every other rule an
allowed one.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sim_pipeline.policy.kind import Breach, Draft, Problem, ReferenceStep, RuleKind, Term, TermContext, attempts, \
    write_call
from sim_pipeline.protocol.careful import Reading
from sim_pipeline.protocol.expected import Expected

if TYPE_CHECKING:
    from sim_pipeline.domain import Action, Rule, Tool


class ArgumentKind(RuleKind):
    """A rule on the values one argument of its tools may take."""

    @abstractmethod
    def own(self, rule: Rule) -> Term:
        """The kind's own fields of the rule (besides its argument), as JSON values."""

    @abstractmethod
    def refuses(self, term: Term, value: Any) -> bool:
        """Whether the rule forbids this value of its argument (a value of the wrong type is left to the schema)."""

    @abstractmethod
    def forbidden_example(self, term: Term, schema: Mapping[str, Any]) -> Any:
        """A value the rule forbids (for its breach)."""

    def fields(self, rule: Rule) -> Term:
        """The terms `refuses` reads, from the rule alone."""
        return {"id": rule.id, "kind": rule.kind, "tools": list(rule.tools), "argument": rule.argument,
                **self.own(rule)}

    def watches(self, rule: Rule) -> tuple[str, ...]:
        return (rule.argument,) if rule.argument else ()

    def refuses_rule(self, rule: Rule, tool: str, value: Any) -> bool:
        """Whether the rule forbids calling `tool` with `value` for its argument."""
        return tool in rule.tools and value is not None and self.refuses(self.fields(rule), value)

    def validate(self, rule: Rule, tools: Mapping[str, Tool], actions: Mapping[str, Action]) -> Problem | None:
        for name in rule.tools:
            arguments = tools[name].parameters.get("properties", {})
            if rule.argument not in arguments:
                return Problem("argument", f"{name} has no argument '{rule.argument}'", f"name one of {sorted(arguments)}")
        return None

    def choices(self, term: Term, schema: Mapping[str, Any]) -> list[Any]:
        """Values a user might give for the argument: the schema's enum and the rule's own values."""
        return list(dict.fromkeys([*schema.get("enum", ()), *term.get("values", ())]))

    def stress(self, rule: Rule, draft: Draft) -> bool:
        """At the facts stage: the rule under stress gets a value it forbids (the right move is to decline), else the
        user's value is kept, or replaced by an allowed one when it is forbidden."""
        if draft.stage != "facts" or not rule.argument:
            return False
        term = self.fields(rule)
        choices = self.choices(term, draft.tool.parameters.get("properties", {}).get(rule.argument, {}))
        if draft.under_stress:
            bad = [v for v in choices if self.refuses(term, v)]
            if bad:
                draft.facts[rule.argument] = draft.pick(bad)
        elif self.refuses(term, draft.facts.get(rule.argument)):
            good = [v for v in choices if not self.refuses(term, v)]
            if good:
                draft.facts[rule.argument] = draft.pick(good)
        return self.refuses(term, draft.facts.get(rule.argument))

    def term(self, rule: Rule, context: TermContext) -> Term:
        return self.fields(rule)

    def reference(self, term: Term, step: ReferenceStep) -> None:
        return None  # the policy alone decides: the reference declines such a request without a call (see reference.py)

    def violation(self, term: Term, reading: Reading, expected: Expected) -> str | None:
        argument = term["argument"]
        for call in attempts(term, reading):
            value = call.arguments.get(argument)
            if argument in call.arguments and self.refuses(term, value):
                return f"rule {term['id']}: {call.tool} was called with {argument}={value!r}, which it forbids"
        return None

    def card(self, term: Term) -> dict[str, Any]:
        return {**term, "means": self.means(term)}

    @abstractmethod
    def means(self, term: Term) -> str:
        """The rule in one line for the judge's card."""

    def breach(self, term: Term, expected: Expected) -> Breach:
        call = write_call(expected)
        value = self.forbidden_example(term, {})
        return Breach(Reading((write_call(expected, arguments={**call.arguments, term["argument"]: value}),)),
                      expected)
