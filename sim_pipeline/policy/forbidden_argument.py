"""forbidden_argument: an argument of the rule's tools may never take the listed values."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sim_pipeline.policy._arguments import ArgumentKind
from sim_pipeline.policy.kind import Term

if TYPE_CHECKING:
    from sim_pipeline.domain import Rule


class ForbiddenArgument(ArgumentKind):
    name = "forbidden_argument"
    needs = ("tool", "argument", "values")
    conduct_rule = "forbidden_argument_value"
    order = 32

    def own(self, rule: Rule) -> Term:
        return {"values": list(rule.values)}

    def refuses(self, term: Term, value: Any) -> bool:
        return value is not None and str(value).lower() in {str(v).lower() for v in term["values"]}

    def means(self, term: Term) -> str:
        return f"never call {', '.join(term['tools'])} with {term['argument']} one of {term['values']}"

    def forbidden_example(self, term: Term, schema: Mapping[str, Any]) -> Any:
        return term["values"][0]


KIND = ForbiddenArgument()
