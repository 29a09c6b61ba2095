"""allowed_values: an argument of the rule's tools may take only the listed values (refund methods)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sim_pipeline.policy._arguments import ArgumentKind
from sim_pipeline.policy.kind import Term

if TYPE_CHECKING:
    from sim_pipeline.domain import Rule

OUTSIDE = "cash"  # a value outside every list a test pack writes, for the breach


class AllowedValues(ArgumentKind):
    name = "allowed_values"
    needs = ("tool", "argument", "values")
    conduct_rule = "forbidden_argument_value"
    order = 31

    def own(self, rule: Rule) -> Term:
        return {"values": list(rule.values)}

    def refuses(self, term: Term, value: Any) -> bool:
        return value is not None and str(value).lower() not in {str(v).lower() for v in term["values"]}

    def means(self, term: Term) -> str:
        return f"call {', '.join(term['tools'])} only with {term['argument']} one of {term['values']}"

    def forbidden_example(self, term: Term, schema: Mapping[str, Any]) -> Any:
        return next((v for v in [*schema.get("enum", ()), OUTSIDE, f"not-{term['values'][0]}"]
                     if self.refuses(term, v)))


KIND = AllowedValues()
