"""expression: the rule's tools may be called only when a CEL predicate (`when`) holds.

The predicate reads `record` (the user's record as the world holds it), `linked` (the records it links to, by link
field: `linked.customer_id.tier`), `args` (the call's arguments), `now` (the world's clock, a timestamp:
`now - date(record.booked_at) < duration('24h')`, where `date` reads an ISO date or date-time) and `tables`
(domain.yaml's lookup tables: `args.bags <= tables.allowance[linked.user_id.tier][record.cabin]`), with CEL's own
operators and macros (`size`, `all`, `exists`, `map`, `filter`) and `sum(list)`. CEL is evaluated by the Rust cel-interpreter (the
common-expression-language package, sim_pipeline/expressions.py): no `eval`, no home-made parser, no side effects.

A situation under stress is one where the predicate does not hold (its record or the user's request is changed until
it fails), with the right move for each side: where only the call's arguments break it, the policy alone forbids the
request (decline, or hand it over); where the record breaks it, the agent must read the record and decline. Every
attempt of the tools (applied or refused) where it does not hold is a breach, for the oracle, the conduct rules and
the embedded judge alike.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sim_pipeline import defaults
from sim_pipeline.expressions import FAILURES, date, evaluate, reads
from sim_pipeline.json_schema import fits
from sim_pipeline.policy.kind import Breach, Draft, Problem, ReferenceStep, RuleKind, Term, TermContext, attempts, \
    write_call
from sim_pipeline.protocol.careful import Reading
from sim_pipeline.protocol.expected import Expected

if TYPE_CHECKING:
    from sim_pipeline.domain import Action, Rule, Tool

ROOTS = ("record", "linked", "args", "now", "tables")  # the names a predicate may read
_NUMBER = re.compile(r"(?<![\w.'\"])-?\d+(?:\.\d+)?(?![\w'\"])")
_DURATION = re.compile(r"duration\(\s*['\"](\d+)([smhd])['\"]\s*\)")
_UNIT = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def holds(when: str, *, record: Mapping[str, Any] | None, linked: Mapping[str, Any] | None, args: Mapping[str, Any],
          now: str, tables: Mapping[str, Any]) -> bool | None:
    """The predicate's value, or None when it cannot be evaluated on these values (a field it reads is missing, a
    type does not match): an undecidable predicate forbids nothing."""
    try:
        value = evaluate(when, {"record": dict(record or {}), "linked": dict(linked or {}), "args": dict(args),
                                "now": now, "tables": dict(tables)})
    except FAILURES:
        return None
    return value if isinstance(value, bool) else None


class Expression(RuleKind):
    name = "expression"
    needs = ("tools", "when")
    conduct_rule = "broke_expression_rule"
    order = 15  # after the verification (the record is read by then), before the user is asked to approve
    predicate = True  # it holds for some records and requests and not for others: both sides are planned

    def validate(self, rule: Rule, tools: Mapping[str, Tool], actions: Mapping[str, Action]) -> Problem | None:
        example = "now - date(record.booked_at) < duration('24h') || record.insured"
        try:
            unknown = sorted(reads(rule.when or "") - set(ROOTS))
        except ValueError as exc:
            return Problem("when", f"not a CEL expression ({str(exc).splitlines()[0]})", f"write a predicate, e.g. "
                           f"{example}")
        if unknown:
            return Problem("when", f"reads {unknown}, which no situation provides", f"read only {list(ROOTS)} "
                           "(record: the user's record, linked: the records it links to, args: the call's arguments)")
        return None

    def constraints(self, rule: Rule) -> tuple[dict[str, str], ...]:
        """A predicate on the record is put under stress on an existing one: never planned with a world state that
        has none to change (missing, already done, half done, unknown)."""
        if not rule.when or not reads(rule.when) & {"record", "linked"}:
            return ()
        return tuple({"rule": rule.id, "world_state": s} for s in defaults.WORLD_STATES
                     if s not in defaults.ELIGIBILITY_WORLD_STATES)

    def watches(self, rule: Rule) -> tuple[str, ...]:
        return tuple(sorted(set(re.findall(r"\bargs\.(\w+)", rule.when or ""))))

    def stress(self, rule: Rule, draft: Draft) -> bool:
        """At the facts stage: under stress, change the record or the user's request until the predicate fails;
        otherwise until it holds. Where the record fails it, the write is not allowed on that record (the agent must
        read it and decline); where only the request does, the policy alone refuses it."""
        if draft.stage != "facts" or not rule.when:
            return False
        wanted = not draft.under_stress
        now, tables = defaults.WORLD_NOW, draft.domain.tables

        def value(record: Mapping[str, Any] | None, args: Mapping[str, Any],
                  linked: Mapping[str, Any] | None = None) -> bool | None:
            return holds(rule.when or "", record=record, linked=draft.linked if linked is None else linked, args=args,
                         now=now, tables=tables)

        if value(draft.record, typed(draft.tool, draft.facts)) is not wanted:
            for where, key, found in _search(rule.when, draft, wanted, value) or ():
                if where == "record":
                    draft.record[key] = found  # type: ignore[index]
                elif where == "linked":  # a copy of the linked record, set up in the situation's world
                    link, field = key.split(".", 1)
                    draft.linked[link] = draft.relinked[link] = {**draft.linked[link], field: found}
                else:
                    draft.facts[key] = found
        now_holds = value(draft.record, typed(draft.tool, draft.facts))
        if now_holds is False:
            # A predicate on the record alone: the write is not allowed on it (read it, then decline); one that reads
            # the request: the policy refuses what the user asks (decline, or hand it over).
            draft.notes["policy_refused" if "args" in reads(rule.when) else "ineligible"] = True
        return draft.under_stress and now_holds is False

    def term(self, rule: Rule, context: TermContext) -> Term:
        hidden = {"pending_action", "version"}  # the world's bookkeeping, not the record's facts
        record = {k: v for k, v in (context.record or {}).items() if k not in hidden} if context.record else None
        props = context.tool.parameters.get("properties", {})
        return {"when": rule.when, "record": record, "linked": {k: dict(v) for k, v in context.linked.items()},
                "now": context.now or defaults.WORLD_NOW, "tables": dict(context.domain.tables),
                "arg_types": {a: props.get(a, {}).get("type") for a in self.watches(rule)}}

    def reference(self, term: Term, step: ReferenceStep) -> None:
        """Where the record breaks the predicate, read it and decline (a careful agent checks before it writes);
        a request the predicate refuses by its arguments alone is declined without a call (reference.py)."""
        if step.writes and step.reply is None and self.check(term, step.arguments(step.expected.tool or "")) is False:
            step.look()
            step.reply = step.cannot

    def check(self, term: Term, args: Mapping[str, Any]) -> bool | None:
        """The predicate on the situation's record with these call arguments (text in a numeric argument read as
        the number it says, as the schema types it)."""
        return holds(term["when"], record=term["record"], linked=term["linked"], args=_as_types(args, term["arg_types"]),
                     now=term["now"], tables=term["tables"])

    def violation(self, term: Term, reading: Reading, expected: Expected) -> str | None:
        for call in attempts(term, reading):
            if self.check(term, call.arguments) is False:
                return f"rule {term['id']}: {call.tool} was attempted where `{term['when']}` does not hold"
        return None

    def card(self, term: Term) -> dict[str, Any]:
        return {**term, "means": f"call {', '.join(term['tools'])} only when `{term['when']}` holds (record: the "
                                 "customer's record shown, args: the call's arguments)"}

    def breach(self, term: Term, expected: Expected) -> Breach:
        """The intended write with the user's own request, where the predicate fails on it (a stressed situation),
        else with an argument changed until it fails."""
        base = write_call(expected)
        args = {**base.arguments, **expected.arguments}
        if self.check(term, args) is not False:
            others = _compared(term["when"], ("record", term["record"]), ("args", args))
            for key, found in _argument_candidates(term["when"], args, others):
                if self.check(term, {**args, key: found}) is False:
                    args = {**args, key: found}
                    break
        return Breach(Reading((write_call(expected, arguments=args),)), expected)


def typed(tool: Tool, facts: Mapping[str, Any]) -> dict[str, Any]:
    """The user's facts (stored as text) in the types the tool's schema declares, as a call would carry them."""
    props = tool.parameters.get("properties", {})
    return _as_types(facts, {name: props.get(name, {}).get("type") for name in facts})


def _as_types(values: Mapping[str, Any], types: Mapping[str, str | None]) -> dict[str, Any]:
    """Values in the JSON types named (integer, number, boolean, array, object); others as they are."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        kind = types.get(name)
        try:
            if kind == "integer" and isinstance(value, str):
                value = int(float(value))
            elif kind == "number" and isinstance(value, str):
                value = float(value)
            elif kind == "boolean" and isinstance(value, str):
                value = value.strip().lower() in ("true", "yes", "1")
            elif kind in ("array", "object") and isinstance(value, str):
                value = json.loads(value)
        except ValueError:
            pass
        out[name] = value
    return out


def _numbers(when: str) -> list[float]:
    """The numbers a predicate compares with, and the day counts of its durations."""
    found = [float(n) for n in _NUMBER.findall(_DURATION.sub("", when))]
    return found


def _moments(when: str, now: str, like: str) -> list[str]:
    """Dates around each duration the predicate measures from now (inside and outside it), in the shape of `like`
    (a date, or a date-time)."""
    clock, shape = date(now), "%Y-%m-%d" if len(like) == 10 else "%Y-%m-%dT%H:%M:%SZ"
    out = []
    for amount, unit in _DURATION.findall(when):
        span = timedelta(**{_UNIT[unit]: int(amount)})
        for moment in (clock - span / 2, clock - span * 1.5, clock + span / 2, clock + span * 1.5):
            out.append(moment.strftime(shape))
    return out


def _candidates(value: Any, when: str, spec_values: tuple[Any, ...] = (), others: tuple[float, ...] = ()) -> list[Any]:
    """Values to try in place of one: the field's declared values, numbers around the predicate's constants and the
    other numbers it compares (`others`), booleans flipped, timestamps around its durations, lists cut or grown."""
    out: list[Any] = list(spec_values)
    if isinstance(value, bool):
        out += [not value]
    elif isinstance(value, (int, float)):
        for n in [*_numbers(when), *others]:
            out += [n - 1, n, n + 1] if isinstance(value, int) else [round(n * 0.5, 2), n, round(n * 1.5 + 1, 2)]
        out = [int(v) if isinstance(value, int) else float(v) for v in out if isinstance(v, (int, float))]
    elif isinstance(value, str) and re.match(r"\d{4}-\d{2}-\d{2}", value):
        out += _moments(when, defaults.WORLD_NOW, value)
    elif isinstance(value, list) and value:
        # Around each count the predicate names: one item, and the count and one past it (the items repeated in
        # turn, so a grown list still holds only values the world knows), never more than that.
        sizes = [1] + [int(n) + d for n in _numbers(when) for d in (0, 1) if 0 < n < defaults.EXPRESSION_LIST_MAX]
        out += [[value[i % len(value)] for i in range(size)] for size in dict.fromkeys(sizes)]
    return [v for v in out if v != value]


def _argument_candidates(when: str, args: Mapping[str, Any],
                         others: tuple[float, ...] = ()) -> list[tuple[str, Any]]:
    return [(key, found) for key in sorted(args) if f"args.{key}" in when
            for found in _candidates(args[key], when, others=others)]


def _compared(when: str, *sources: tuple[str, Mapping[str, Any] | None]) -> tuple[float, ...]:
    """The numbers the predicate reads from the record and the request (what a field is compared with)."""
    return tuple(float(v) for root, values in sources for k, v in sorted((values or {}).items())
                 if f"{root}.{k}" in when and isinstance(v, (int, float)) and not isinstance(v, bool))


def _search(when: str, draft: Draft, wanted: bool, value: Any) -> tuple[tuple[str, str, Any], ...] | None:
    """The fewest changes (of record fields the predicate reads, of fields of the records it links to, or of the
    user's facts; one, else two) that give the predicate the wanted value, tried in a fixed order; None when none
    does."""
    fields = {f.name: f for f in (draft.entity.fields if draft.entity is not None else ())}
    args = typed(draft.tool, draft.facts)
    others = _compared(when, ("record", draft.record), ("args", args))
    tries: list[tuple[str, str, Any]] = []
    for key in sorted(draft.record or {}):
        if f"record.{key}" in when:
            spec = fields.get(key)
            tries += [("record", key, v) for v in _candidates(draft.record[key], when,  # type: ignore[index]
                                                                tuple(spec.values) if spec is not None else (), others)]
    targets = {e.name: {f.name: f for f in e.fields} for e in draft.domain.entities}
    links = draft.entity.links() if draft.entity is not None else {}
    for link, linked in sorted(draft.linked.items()):
        for key in sorted(linked):
            if f"linked.{link}.{key}" in when:
                spec = targets.get(links.get(link, ""), {}).get(key)
                tries += [("linked", f"{link}.{key}", v) for v in _candidates(
                    linked[key], when, tuple(spec.values) if spec is not None else (), others)]
    # A changed argument still fits the tool's schema: a value the world would refuse stresses nothing but validation.
    props = draft.tool.parameters.get("properties", {})
    tries += [("args", key, v) for key, v in _argument_candidates(when, args, others)
              if not isinstance(props.get(key), dict) or fits(v, props[key])]
    tries = tries[:defaults.EXPRESSION_STRESS_TRIES]
    # One change, then two (a predicate that needs two things at once: an old return of a title with no grace).
    pairs = itertools.combinations(tries[:defaults.EXPRESSION_STRESS_PAIRS], 2)
    for changes in itertools.chain(((t,) for t in tries), pairs):
        if len({(where, key) for where, key, _ in changes}) < len(changes):
            continue
        record = {**(draft.record or {}), **{k: v for where, k, v in changes if where == "record"}}
        trial = {**args, **{k: v for where, k, v in changes if where == "args"}}
        linked = {link: dict(r) for link, r in draft.linked.items()}
        for where, key, found in changes:
            if where == "linked":
                link, field = key.split(".", 1)
                linked[link][field] = found
        if value(record if draft.record is not None else None, trial, linked) is wanted:
            return changes
    return None


KIND = Expression()
