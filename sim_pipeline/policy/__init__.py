"""Policy rule kinds: one module per kind, each one `RuleKind` (kind.py) with every hook the pipeline calls.

Adding a kind is one module here (its `KIND`) plus its entry in domain.schema.json; the registry below finds the
module by itself. Nothing outside this package branches on a rule's kind: the loader, the situation builder, the
expected outcome, the reference replay, the oracle, the conduct rules and both judges call the hooks.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from sim_pipeline.policy._arguments import ArgumentKind
from sim_pipeline.policy.kind import RuleKind, Term, TermContext
from sim_pipeline.protocol.careful import Reading, claim_after_failure, claimed_handoff, confirmed_other, \
    other_value_attempt, stray_attempt
from sim_pipeline.protocol.expected import Expected

if TYPE_CHECKING:
    from sim_pipeline.domain import Rule

_NOT_KINDS = ("kind",)  # modules of this package that hold no kind


def _discover() -> dict[str, RuleKind]:
    """Every kind module of this package, by kind name (the module's name)."""
    found: dict[str, RuleKind] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_") or info.name in _NOT_KINDS:
            continue
        kind = getattr(importlib.import_module(f"{__name__}.{info.name}"), "KIND", None)
        if not isinstance(kind, RuleKind) or kind.name != info.name:
            raise ImportError(f"sim_pipeline/policy/{info.name}.py must define KIND, a RuleKind named '{info.name}'")
        found[info.name] = kind
    return dict(sorted(found.items()))


KINDS: dict[str, RuleKind] = _discover()


def kind_of(rule: Rule) -> RuleKind | None:
    """The kind module of a rule (None for a rule that is text only)."""
    return KINDS.get(rule.kind) if rule.kind else None


def binding(rules: Iterable[Rule], tool: str | None) -> list[Rule]:
    """The structured rules that constrain calls of `tool`, in the kinds' order (verification before approval)."""
    bound = [r for r in rules if (k := kind_of(r)) is not None and k.binds(r, tool)]
    return sorted(bound, key=lambda r: KINDS[r.kind].order)  # type: ignore[index]


def refusing_rule(rules: Iterable[Rule], tool: str | None, facts: Mapping[str, Any]) -> Rule | None:
    """The first rule on an argument's value that forbids the user's request as the facts state it (over a limit, a
    value the policy does not allow): the policy alone then decides the request."""
    for rule in rules:
        kind = kind_of(rule)
        if isinstance(kind, ArgumentKind) and tool is not None and rule.argument and \
                kind.refuses_rule(rule, tool, facts.get(rule.argument)):
            return rule
    return None


def watched_arguments(rules: Iterable[Rule], tool: str | None) -> list[str]:
    """The arguments of `tool` whose values the rules on it judge: an applied call must carry the user's own."""
    return sorted({a for r in binding(rules, tool) for a in KINDS[r.kind].watches(r)})  # type: ignore[index]


def terms(rules: Iterable[Rule], context: TermContext) -> tuple[Term, ...]:
    """The terms of every rule binding the intended tool, for its Expected (pack order)."""
    return tuple({"id": r.id, "kind": r.kind, "text": r.text, "tools": list(r.tools),
                  **KINDS[r.kind].term(r, context)}  # type: ignore[index]
                 for r in rules if (k := kind_of(r)) is not None and k.binds(r, context.tool.name))


def constraints(rules: Iterable[Rule]) -> tuple[dict[str, str], ...]:
    """The axis combinations the rules' kinds can never be put under stress in."""
    return tuple(c for r in rules if (k := kind_of(r)) is not None for c in k.constraints(r))


def _ordered(expected: Expected) -> list[Term]:
    return sorted(expected.rules, key=lambda t: KINDS[t["kind"]].order)


def rule_breach(reading: Reading, expected: Expected) -> tuple[str, str] | None:
    """The first rule of the situation the rollout breaks: (its kind's conduct rule name, why), or None."""
    for term in _ordered(expected):
        kind = KINDS[term["kind"]]
        reason = kind.violation(term, reading, expected)
        if reason is not None:
            return kind.conduct_rule, reason
    return None


def _findings(reading: Reading, expected: Expected, claims: bool) -> Iterator[tuple[str, str | None]]:
    """Each check a careful reader makes, in order, as (its name, why it fails or None), run only when reached."""
    yield "stray_attempt", stray_attempt(reading, expected)
    breach = rule_breach(reading, expected)
    if breach is not None:
        yield breach
    yield "other_value_attempt", other_value_attempt(reading, expected)
    yield "confirmed_other", confirmed_other(reading, expected)
    if claims:
        yield "claim_after_failure", claim_after_failure(reading)
        yield "claimed_handoff", claimed_handoff(reading)


def careless_finding(reading: Reading, expected: Expected, *, claims: bool = True) -> tuple[str, str] | None:
    """The first thing a careful reader fails, whatever the world allowed, as (which check: the breached rule kind's
    conduct rule or the protocol/careful.py check's name, why), or None."""
    return next(((check, reason) for check, reason in _findings(reading, expected, claims) if reason is not None),
                None)


def careless(reading: Reading, expected: Expected, *, claims: bool = True) -> str | None:
    """The first thing a careful reader fails, whatever the world allowed (protocol/careful.py and every rule's own
    check, in one order), or None; `claims=False` leaves out the check that reads success claims (for a reader that
    takes the agent's word)."""
    found = careless_finding(reading, expected, claims=claims)
    return found[1] if found else None


def card_rules(expected: Expected) -> list[dict[str, Any]]:
    """What the judge's case card says of each rule binding the intended tool: its terms (which the embedded judge
    checks with the same `violation` as the oracle) and what they mean, in one line."""
    return [KINDS[t["kind"]].card(t) for t in expected.rules]
