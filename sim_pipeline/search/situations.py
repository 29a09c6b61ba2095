"""Render covering-array cells into concrete situations: a real entity, hidden facts, a goal, a world setup."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pandas as pd

from sim_pipeline import defaults, policy
from sim_pipeline.axes import MULTI_TOOL, UNRELATED
from sim_pipeline.domain import Action, Domain, Entity, Tool
from sim_pipeline.policy.kind import Draft
from sim_pipeline.models.phrasing import phrasings, request_phrase
from sim_pipeline.seeding import rng, short_id
from sim_pipeline.situation import AXES, Situation
from sim_pipeline.world import references
from sim_pipeline.world.arguments import compiled_tools
from sim_pipeline.world.infer import Binding, bind, default_action, makes_record
from sim_pipeline.world.options import WorldOptions
from sim_pipeline.world.oracle import expect, passes_without_tools
from sim_pipeline.world.reference import solve
from sim_pipeline.world.setup import PENDING_FIELD, Fault, WorldSetup
from sim_pipeline.world.state import State, new_id, record_key
from sim_pipeline.json_schema import fits
from sim_pipeline.world.values import draw_from_schema, draw_value

UNRELATED_REQUESTS = (
    "Can you recommend a good pizza place near me?", "What will the weather be like this weekend?",
    "Could you help me write a birthday poem for my sister?", "What is the capital of Australia?",
    "Can you explain how compound interest works?",
)
PERSISTENT_FAULTS = ("permission_denied",)  # a retry never clears these
ID_FREE_STATES = ("duplicate_entity",)  # the user does not know the id and must be helped to find it


def _pick(gen: np.random.Generator, items: list[Any] | tuple[Any, ...]) -> Any:
    return items[int(gen.integers(len(items)))]


def _intent(domain: Domain, cell: dict[str, str], gen: np.random.Generator) -> Tool | None:
    if cell["tool"] == UNRELATED:
        return None
    if cell["tool"] == MULTI_TOOL:
        # Needs a lookup first: a write on an entity the user can only name by its lookup field.
        bound = {t.name: bind(domain, t) for t in domain.tools}
        others = [t for t in domain.tools if not makes_record(t, bound[t.name])]  # a create names no record to look up
        writers = [t for t in others if t.writes and (e := bound[t.name].entity) is not None and e.lookup_by]
        # With no such writer, any tool but a create: the world always lets a create through, so a create planned
        # with a record already acted on (or a twin) would be a situation no agent can pass.
        others = others or list(domain.tools)
        return _pick(gen, writers) if writers else _pick(gen, others)
    return domain.tool(cell["tool"])


def _action(domain: Domain, tool: Tool, binding: Binding) -> Action:
    return domain.actions.get(tool.name) or default_action(tool, binding.id_argument)


def _fresh_id(domain: Domain, state: State, entity: Entity, gen: np.random.Generator, options: WorldOptions) -> str:
    """An id no record has (the world's own id shape); `missing` when an enum of ids is used up."""
    made = new_id(domain, entity.name, gen, options, state.get(entity.name, {}))
    return "missing" if made is None else record_key(made)


def _fresh_lookup(state: State, entity: Entity, gen: np.random.Generator, options: WorldOptions) -> Any:
    """A lookup value (an email...) no record has, so a lookup by it finds exactly what the situation sets up."""
    spec = next(f for f in entity.fields if f.name == entity.lookup_by)
    taken = {str(r.get(spec.name)).lower() for r in state.get(entity.name, {}).values()}
    value = draw_value(spec, gen, options)
    for _ in range(defaults.WORLD_ID_DRAW_TRIES):
        if str(value).lower() not in taken:
            break
        value = draw_value(spec, gen, options)
    return value


def _mask(action: Action, entity: Entity) -> tuple[str, ...]:
    """The fields the world cannot tell: those the write needs or sets, else (a read) the entity's state fields."""
    fields = set(action.requires) | set(action.sets)
    fields = fields or {f.name for f in entity.fields if f.kind == "enum" and f.name != entity.lookup_by}
    return tuple(sorted(fields or {f.name for f in entity.fields if f.name != entity.lookup_by}))


def _choose_record(domain: Domain, state: State, entity: Entity, tool: Tool, gen: np.random.Generator,
                   options: WorldOptions) -> dict[str, Any]:
    action = _action(domain, tool, bind(domain, tool))
    records = [r for _, r in sorted(state.get(entity.name, {}).items())]
    if not records:  # an event log with nothing in it yet: the situation's record is drawn fresh
        made = new_id(domain, entity.name, gen, options, {})
        records = [{entity.id_argument: made, **{f.name: draw_value(f, gen, options) for f in entity.fields}}]
    literal = {k: v for k, v in action.sets.items() if not str(v).startswith("$")}
    eligible = [r for r in records if all(r.get(k) in v for k, v in action.requires.items())]
    # Not already in the state the write leaves (a cancelled order to cancel): the world state axis plays that one.
    fresh = [r for r in eligible if not literal or any(r.get(k) != v for k, v in literal.items())]
    record = dict(_pick(gen, fresh or eligible or records))
    for key, allowed in action.requires.items():
        if record.get(key) not in allowed:
            record[key] = _pick(gen, list(allowed))  # make it eligible: the world state axis decides what differs
    if literal and all(record.get(k) == v for k, v in literal.items()):
        key = next(iter(sorted(literal)))
        spec = next((f for f in entity.fields if f.name == key), None)
        others = [v for v in (spec.values if spec is not None else ()) if v != literal[key]]
        if others:
            record[key] = _pick(gen, others)
    return record


def _stress(draft: Draft, rules: list[Any]) -> set[str]:
    """Run each rule kind's stress hook at the draft's stage (policy/): the rule the cell names goes under stress,
    the others are kept satisfied. The ids of the rules under stress."""
    stressed = set()
    for rule in rules:
        draft.under_stress = draft.cell["rule"] == rule.id
        if policy.KINDS[rule.kind].stress(rule, draft):
            stressed.add(rule.id)
    return stressed


def _refuse_by_policy(draft: Draft, rules: list[Any]) -> bool:
    """Make the first rule on an argument's value that binds the tool refuse the user's request (a hand-off rule's
    stress: the request must be one the policy forbids); whether one did."""
    for rule in rules:
        kind = policy.KINDS[rule.kind]
        if isinstance(kind, policy.ArgumentKind):
            saved, draft.under_stress = draft.under_stress, True
            refused = kind.stress(rule, draft)
            draft.under_stress = saved
            if refused:
                return True
    return False


def _fact_value(domain: Domain, name: str, spec: dict[str, Any], record: dict[str, Any] | None,
                gen: np.random.Generator, id_alias: tuple[str, str] | None = None, *, state: State | None = None,
                entity: Entity | None = None, options: WorldOptions | None = None, new: bool = False) -> Any:
    """What the user knows for one argument, and it fits the argument's schema: the pool, the record (or a record
    it links to), else a value drawn from the schema itself. A `new` value (one an update writes) never comes from
    the record and differs from what the record holds."""
    if id_alias is not None and record is not None and name == id_alias[0]:
        return record[id_alias[1]]  # `id` on a tool whose entity keys its records by `order_id`
    if "enum" in spec:
        return _pick(gen, spec["enum"])
    if name in domain.facts:  # a pool wins over the record: an update brings a new value, not the current one
        return _pick(gen, domain.facts[name])
    for source in [] if new else _sources(record, entity, state or {}):
        if name in source and fits(source[name], spec):
            return source[name]
    if spec.get("type") in ("number", "integer") and record is not None and not new:
        money = next((v for v in record.values() if isinstance(v, float)), None)
        if money is not None and spec.get("type") == "integer":
            money = int(round(money))  # a count the user gives is a whole number, whatever field it came from
        if money is not None and fits(money, spec):
            return money
    value = draw_from_schema(spec, gen, options or WorldOptions(), name=name)
    for _ in range(defaults.WORLD_ID_DRAW_TRIES if new and record is not None else 0):
        if value != record.get(name):  # type: ignore[union-attr]
            break
        value = draw_from_schema(spec, gen, options or WorldOptions(), name=name)
    return value


def _linked(record: dict[str, Any] | None, entity: Entity | None, state: State) -> dict[str, Any]:
    """The records the user's record links to, by link field (an order's customer under `customer_id`)."""
    if record is None or entity is None:
        return {}
    return {field: found for field, target in sorted(entity.links().items())
            if (found := state.get(target, {}).get(str(record.get(field)))) is not None}


def _sources(record: dict[str, Any] | None, entity: Entity | None, state: State) -> list[dict[str, Any]]:
    """The record, then the records its link fields point at (an order's customer knows the customer's email)."""
    if record is None:
        return []
    linked = [state.get(target, {}).get(str(record.get(field))) for field, target in
              (entity.links().items() if entity is not None else ())]
    return [record, *(r for r in linked if r is not None)]


def build_situation(domain: Domain, state: State, cell: dict[str, str], *, seed: int, variant: int = 0,
                    split: str = "train", n_phrasings: int = 1, source: str = "structured",
                    options: WorldOptions | None = None) -> Situation:
    """Make one cell concrete against the seeded world state."""
    options = options or WorldOptions()
    situation_id = short_id(domain.name, seed, [cell[a] for a in AXES], variant)
    gen = rng(seed, "situation", situation_id)
    tool = _intent(domain, cell, gen)
    binding = bind(domain, tool) if tool else Binding(None, None)
    entity = binding.entity
    id_argument = binding.id_argument or (entity.id_argument if entity else None)  # the id the user quotes
    upserts: list[tuple[str, dict[str, Any]]] = []
    deletes: list[tuple[str, str]] = []
    masked: list[tuple[str, str, tuple[str, ...]]] = []
    record: dict[str, Any] | None = None
    entity_id = None
    effect: dict[str, Any] = {}
    notes: dict[str, Any] = {"stance": cell["stance"], "history": cell["history"]}
    world_state = cell["world_state"]
    event_like = tool is not None and tool.writes and makes_record(tool, binding)
    facts: dict[str, Any] = {}
    bound = policy.binding(domain.rules, tool.name if tool is not None else None)
    # Each rule binding the tool shapes the situation (policy/): the one the cell names goes under stress.
    draft = Draft(domain, cell, tool, entity, None, None, existing=entity is not None and not event_like and
                  world_state != "entity_missing", facts=facts, notes=notes, gen=gen,
                  draw_fact=lambda name, spec: _fact_value(domain, name, spec, record, gen, state=state, entity=entity,
                                                           options=options))
    draft.refuse_by_policy = lambda: _refuse_by_policy(draft, bound)
    if tool is not None and entity is not None:
        action = _action(domain, tool, binding)
        record = _choose_record(domain, state, entity, tool, gen, options)
        draft.action, draft.record = action, record
        draft.linked = _linked(record, entity, state)
        _stress(draft, bound)  # the record stage: before its twin is copied or the user's facts are drawn
        entity_id = record_key(record[entity.id_argument])
        by_lookup = binding.id_argument is None and entity.lookup_by is not None
        if event_like:
            # A create or a logged event names no existing record: only already_acted_on (the same record is already
            # there) changes the world; every other state plays as entity_exists.
            notes["already_applied"] = world_state == "already_acted_on"
            upserts.append((entity.name, record))
        elif world_state == "entity_missing":
            entity_id = _fresh_id(domain, state, entity, gen, options)
            record = {**record, entity.id_argument: entity_id}
            if by_lookup:  # a tool without the id finds records by lookup: the user's value must find none
                record[entity.lookup_by] = _fresh_lookup(state, entity, gen, options)  # type: ignore[index]
        else:
            if by_lookup and tool.writes:  # the write finds its record by lookup: make that name exactly one
                record[entity.lookup_by] = _fresh_lookup(state, entity, gen, options)  # type: ignore[index]
            if world_state == "already_acted_on":
                # The effect is already in place; `$argument` values are resolved once the facts are drawn below.
                notes["already_applied"] = True
            elif world_state == "partially_completed":
                # An earlier write was half done: the intended one, or for a read the entity's first writer.
                writer = tool if tool.writes else next((t for t in domain.tools if t.writes and t.kind != "create"
                                                        and bind(domain, t).entity == entity), None)
                if writer is not None:
                    record[PENDING_FIELD] = writer.name
            elif world_state == "duplicate_entity" and entity.lookup_by:
                twin = {**record, entity.id_argument: _fresh_id(domain, state, entity, gen, options)}
                upserts.append((entity.name, twin))
                notes["twin_id"] = twin[entity.id_argument]
            elif world_state == "unknown":
                masked.append((entity.name, entity_id, _mask(action, entity)))
            upserts.append((entity.name, record))
    stressed: set[str] = set()
    if tool is not None:
        draft.record = record
        props = tool.parameters.get("properties", {})
        alias = (binding.id_argument, entity.id_argument) if entity and binding.id_argument else None
        # Arguments an update writes into the record (`$argument`) are new values, never the record's current ones.
        written = {v[1:] for v in _action(domain, tool, binding).sets.values() if v.startswith("$")}
        written -= {entity.lookup_by, entity.id_argument} if entity is not None else set()  # how the record is found
        for name in tool.required:
            facts[name] = _fact_value(domain, name, props.get(name, {}), record, gen, alias, state=state,
                                      entity=entity, options=options, new=name in written and not event_like)
        if entity is not None and entity.lookup_by and record is not None:
            facts.setdefault(entity.lookup_by, record[entity.lookup_by])
        named = compiled_tools(domain)[tool.name].references
        if named:  # what the user asks for names records that exist (their own payment method, a real flight)
            references.settle(domain, named, facts, state, rng(seed, "references", situation_id), record)
        draft.stage = "facts"
        stressed = _stress(draft, bound)
        for link, changed in sorted(draft.relinked.items()):  # a linked record a rule's stress changed (a tier)
            upserts.append((entity.links()[link], changed))  # type: ignore[union-attr]
        action = _action(domain, tool, binding)
        effect = {k: (facts.get(v[1:]) if v.startswith("$") else v) for k, v in action.sets.items()
                  if not v.startswith("$") or v[1:] in facts}
        if notes.pop("already_applied", False) and record is not None and entity is not None:
            if not event_like and tool.kind == "delete":
                upserts = [(e, r) for e, r in upserts if r is not record]  # already deleted: the record is gone
                deletes.append((entity.name, entity_id or ""))
            else:
                # The record in `upserts` is this same dict: an event is there with the user's values, a change's effect.
                record.update({k: facts[k] for k in tool.required if k != id_argument} if event_like else effect)
    fault = None
    condition = cell["tool_condition"]
    if tool is not None and condition != "success":
        hits = None if condition in PERSISTENT_FAULTS or (
            condition in options.transient_faults and not options.transient_retry_succeeds) else options.fault_hits
        fault = Fault(tool.name, condition, hits, options.fault_rate)
    opening_facts = _opening_facts(cell, tool, id_argument, facts)
    if cell["stance"] == "mistaken" and entity is not None and id_argument in facts:
        notes["wrong_value"] = {id_argument: _fresh_id(domain, state, entity, gen, options)}
    refused = policy.refusing_rule(domain.rules, tool.name if tool is not None else None, facts) is not None or \
        bool(notes.get("policy_refused"))
    if event_like:  # nothing to find first: only an identical earlier record makes the write wrong
        state_allows = entity is None or world_state != "already_acted_on"
    else:  # a lookup-only write cannot tell two twins apart, so it must not guess
        state_allows = entity is not None and world_state in ("entity_exists", "partially_completed") or (
            world_state == "duplicate_entity" and binding.id_argument is not None)
    expect_write = bool(tool is not None and tool.writes and state_allows and condition not in PERSISTENT_FAULTS
                        and not refused and not notes.get("ineligible"))
    if tool is None:
        request, noun = _pick(gen, UNRELATED_REQUESTS), "question"
        goal = f"You want an answer to an off-topic question: {request}"
        texts = tuple(request for _ in range(n_phrasings))
    else:
        request, noun = request_phrase(tool.name, tool.description, tool.phrase)
        notes["request"] = request
        shown = {k: (notes.get("wrong_value", {}).get(k, v)) for k, v in facts.items() if k in opening_facts}
        goal = f"You want to {request} ({tool.description.split('.')[0].lower()})."
        texts = phrasings(cell["stance"], cell["history"], request, noun, shown, n=n_phrasings, gen=gen)
        if notes.get("pressure"):  # what the user says against a rule under stress (policy/)
            texts = tuple(f"{t} {notes['pressure']}" for t in texts)
    made = Situation(
        situation_id=situation_id, seed=seed, domain=domain.name, cell=dict(cell), split=split, goal=goal,
        intent_tool=tool.name if tool else None, entity=entity.name if entity else None, entity_id=entity_id,
        facts={k: v if isinstance(v, (list, dict)) else str(v) for k, v in facts.items()},
        opening_facts=tuple(opening_facts), expect_write=expect_write,
        effect=effect, setup=WorldSetup(tuple(upserts), tuple(deletes), tuple(masked), fault), phrasings=texts,
        source=source, notes=notes,
    )
    return dataclasses.replace(made, expected=expect(domain, made, sorted(stressed), state))


def _opening_facts(cell: dict[str, str], tool: Tool | None, id_argument: str | None, facts: dict[str, Any]) -> list[str]:
    if tool is None or cell["stance"] == "ambiguous":
        return []
    hidden_id = cell["tool"] == MULTI_TOOL or cell["world_state"] in ID_FREE_STATES
    names = [k for k in facts if not (hidden_id and k == id_argument)]
    if cell["stance"] in ("unsure", "exploratory"):
        return names[:1]
    return names


def split_of(situation_id: str, heldout_share: float) -> str:
    """heldout or train, by a stable hash of the situation id (the same under every policy version)."""
    return "heldout" if rng("split", situation_id).random() < heldout_share else "train"


def build_situations(domain: Domain, state: State, cells: pd.DataFrame, *, seed: int, n_phrasings: int,
                     heldout_share: float = defaults.HELDOUT_SHARE, options: WorldOptions | None = None) -> pd.DataFrame:
    """One situation per planned cell, split held-out/train, as a table (with `noop_pass`, see world/oracle.py, and
    the reference replay's `solvable`, `reference` reason and `reference_calls`, see world/reference.py)."""
    rows = []
    for cell in cells[list(AXES)].to_dict("records"):
        situation_id = short_id(domain.name, seed, [cell[a] for a in AXES], 0)
        situation = build_situation(domain, state, cell, seed=seed, split=split_of(situation_id, heldout_share),
                                    n_phrasings=n_phrasings, options=options)
        # Whether an agent that never calls a tool could pass it (the oracle decides): the no-op floor of scores.
        # Whether the reference solution passes it: the blocking situations_solvable check.
        reference = solve(domain, situation, seed=seed, state=state)
        rows.append({**situation.to_row(), "noop_pass": passes_without_tools(domain, situation, seed=seed, state=state),
                     "solvable": reference.solvable, "reference": reference.reason,
                     "reference_calls": [f"{tool}({args})" for tool, args in reference.calls]})
    return pd.DataFrame(rows).sort_values("situation_id", kind="stable").reset_index(drop=True)


def stressed_counts(situations: pd.DataFrame) -> dict[str, int]:
    """Per structured rule, the situations that put it under stress (each situation's stored expected outcome)."""
    if "expected" not in situations:
        return {}
    counts: dict[str, int] = {}
    for text in situations["expected"]:
        want = json.loads(text) if isinstance(text, str) else {}
        for rule in {t["id"] for t in want.get("rules", ())} | set(want.get("stressed", ())):
            counts.setdefault(rule, 0)
        for rule in want.get("stressed", ()):
            counts[rule] += 1
    return counts
