"""argument_limit: an argument of the rule's tools may not exceed `max` (a refund above $500)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sim_pipeline import defaults
from sim_pipeline.policy._arguments import ArgumentKind
from sim_pipeline.policy.kind import Draft, Term

if TYPE_CHECKING:
    from sim_pipeline.domain import Rule


class ArgumentLimit(ArgumentKind):
    name = "argument_limit"
    needs = ("tool", "argument", "max")
    conduct_rule = "exceeded_argument_limit"
    order = 30

    def own(self, rule: Rule) -> Term:
        return {"max": rule.limit}

    def refuses(self, term: Term, value: Any) -> bool:
        try:
            return value is not None and float(value) > term["max"]
        except (TypeError, ValueError):
            return False

    def means(self, term: Term) -> str:
        return f"never call {', '.join(term['tools'])} with {term['argument']} above {term['max']:g}"

    def forbidden_example(self, term: Term, schema: Mapping[str, Any]) -> Any:
        return round(term["max"] * defaults.LIMIT_OVER_FACTOR, 2)

    def stress(self, rule: Rule, draft: Draft) -> bool:
        """The user's value over the limit when the rule is under stress and under it otherwise, in the argument's
        own type (a day count stays a whole number). The record follows where it holds the value: its field of the
        argument's name, else, for an amount, its first money field (the order total a refund is drawn from)."""
        factor = defaults.LIMIT_OVER_FACTOR if draft.under_stress else defaults.LIMIT_UNDER_FACTOR
        amount = round((rule.limit or 0) * factor, 2)
        if draft.stage == "record":
            schema = draft.tool.parameters.get("properties", {}).get(rule.argument or "", {})
            record = draft.record or {}
            held = rule.argument if rule.argument in record and isinstance(record[rule.argument], (int, float)) \
                else next((k for k, v in record.items() if isinstance(v, float)), None) \
                if schema.get("type") == "number" else None
            if held is not None:
                draft.record[held] = amount  # type: ignore[index]
            return False
        term = self.fields(rule)
        if rule.argument and self.refuses(term, draft.facts.get(rule.argument)) is not draft.under_stress:
            schema = draft.tool.parameters.get("properties", {}).get(rule.argument, {})
            if schema.get("type") == "integer":  # a count of days stays a count: over rounds up, under down
                amount = math.ceil(amount) if draft.under_stress else math.floor(amount)
            draft.facts[rule.argument] = amount
        return self.refuses(term, draft.facts.get(rule.argument))


KIND = ArgumentLimit()
