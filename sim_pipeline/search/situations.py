"""Render covering-array cells into concrete situations: a real entity, hidden facts, a goal, a world setup."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.axes import MULTI_TOOL, UNRELATED
from sim_pipeline.domain import Domain, Entity, Tool
from sim_pipeline.search.phrasing import phrasings, request_phrase
from sim_pipeline.seeding import rng, short_id
from sim_pipeline.situation import AXES, Situation
from sim_pipeline.world.options import WorldOptions
from sim_pipeline.world.sandbox import PENDING_FIELD, Fault, WorldSetup, default_action
from sim_pipeline.world.state import State, draw_id

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
        writers = [t for t in domain.tools if t.writes and (e := domain.entity_for(t)) is not None and e.lookup_by]
        return _pick(gen, writers) if writers else _pick(gen, list(domain.tools))
    return domain.tool(cell["tool"])


def _limit_rule(domain: Domain, tool: Tool | None) -> Any:
    return next((r for r in domain.rules if r.kind == "argument_limit" and tool and tool.name in r.tools), None)


def _choose_record(domain: Domain, state: State, entity: Entity, tool: Tool, gen: np.random.Generator) -> dict[str, Any]:
    action = domain.actions.get(tool.name) or default_action(tool)
    records = [r for _, r in sorted(state.get(entity.name, {}).items())]
    eligible = [r for r in records if all(r.get(k) in v for k, v in action.requires.items())]
    record = dict(_pick(gen, eligible or records))
    for key, allowed in action.requires.items():
        if record.get(key) not in allowed:
            record[key] = _pick(gen, list(allowed))  # make it eligible: the world state axis decides what differs
    return record


def _fact_value(domain: Domain, name: str, spec: dict[str, Any], record: dict[str, Any] | None,
                gen: np.random.Generator) -> Any:
    if "enum" in spec:
        return _pick(gen, spec["enum"])
    if name in domain.facts:  # a pool wins over the record: an update brings a new value, not the current one
        return _pick(gen, domain.facts[name])
    if record is not None and name in record:
        return record[name]
    if spec.get("type") in ("number", "integer") and record is not None:
        money = next((v for v in record.values() if isinstance(v, float)), None)
        if money is not None:
            return money
    return f"{name.replace('_', ' ')} details {int(gen.integers(100, 999))}"


def build_situation(domain: Domain, state: State, cell: dict[str, str], *, seed: int, variant: int = 0,
                    split: str = "train", n_phrasings: int = 1, source: str = "structured",
                    options: WorldOptions | None = None) -> Situation:
    """Make one cell concrete against the seeded world state."""
    options = options or WorldOptions()
    situation_id = short_id(domain.name, seed, [cell[a] for a in AXES], variant)
    gen = rng(seed, "situation", situation_id)
    tool = _intent(domain, cell, gen)
    entity = domain.entity_for(tool) if tool else None
    upserts: list[tuple[str, dict[str, Any]]] = []
    masked: list[tuple[str, str, tuple[str, ...]]] = []
    record: dict[str, Any] | None = None
    entity_id = None
    effect: dict[str, Any] = {}
    notes: dict[str, Any] = {"stance": cell["stance"], "history": cell["history"]}
    world_state = cell["world_state"]
    if tool is not None and entity is not None:
        action = domain.actions.get(tool.name) or default_action(tool)
        record = _choose_record(domain, state, entity, tool, gen)
        limit = _limit_rule(domain, tool)
        money_field = next((k for k, v in record.items() if isinstance(v, float)), None)
        if limit is not None and money_field:
            # The rule axis decides whether the limit binds: over it when this rule is under stress, under otherwise.
            factor = defaults.LIMIT_OVER_FACTOR if cell["rule"] == limit.id else defaults.LIMIT_UNDER_FACTOR
            record[money_field] = round((limit.limit or 0) * factor, 2)
        entity_id = str(record[entity.id_argument])
        if world_state == "entity_missing":
            entity_id = draw_id(gen, options, state.get(entity.name, {}))
            record = {**record, entity.id_argument: entity_id}
        else:
            if world_state == "already_acted_on":
                # The effect is already in place; `$argument` values are resolved once the facts are drawn below.
                notes["already_applied"] = True
            elif world_state == "partially_completed" and tool.writes:
                record[PENDING_FIELD] = tool.name
            elif world_state == "duplicate_entity" and entity.lookup_by:
                twin = {**record, entity.id_argument: draw_id(gen, options, state.get(entity.name, {}))}
                upserts.append((entity.name, twin))
                notes["twin_id"] = twin[entity.id_argument]
            elif world_state == "unknown":
                masked.append((entity.name, entity_id, tuple(sorted(set(action.requires) | set(action.sets)))))
            upserts.append((entity.name, record))
    facts: dict[str, Any] = {}
    if tool is not None:
        props = tool.parameters.get("properties", {})
        for name in tool.required:
            facts[name] = _fact_value(domain, name, props[name], record, gen)
        if entity is not None and entity.lookup_by and record is not None:
            facts.setdefault(entity.lookup_by, record[entity.lookup_by])
        for rule in domain.rules:
            verifier = domain.tool(rule.verify_tool) if rule.kind == "verify_before" and rule.verify_tool else None
            if verifier and tool.name in rule.tools:
                for name in verifier.required:
                    facts.setdefault(name, _fact_value(domain, name, verifier.parameters["properties"][name],
                                                       record, gen))
        action = domain.actions.get(tool.name) or default_action(tool)
        effect = {k: (facts.get(v[1:]) if v.startswith("$") else v) for k, v in action.sets.items()}
        if notes.pop("already_applied", False) and record is not None:
            record.update(effect)  # the record in `upserts` is this same dict
    fault = None
    condition = cell["tool_condition"]
    if tool is not None and condition != "success":
        hits = None if condition in PERSISTENT_FAULTS or (
            condition in options.transient_faults and not options.transient_retry_succeeds) else options.fault_hits
        fault = Fault(tool.name, condition, hits)
    opening_facts = _opening_facts(cell, tool, entity, facts)
    if cell["stance"] == "mistaken" and entity is not None and entity.id_argument in facts:
        notes["wrong_value"] = {entity.id_argument: draw_id(gen, options, state.get(entity.name, {}))}
    limit = _limit_rule(domain, tool)
    over_limit = bool(limit and limit.argument in facts and float(facts[limit.argument]) > (limit.limit or 0))
    expect_write = bool(
        tool is not None and tool.writes and entity is not None
        and world_state in ("entity_exists", "partially_completed", "duplicate_entity")
        and condition not in PERSISTENT_FAULTS and not over_limit
    )
    if tool is None:
        request, noun = _pick(gen, UNRELATED_REQUESTS), "question"
        goal = f"You want an answer to an off-topic question: {request}"
        texts = tuple(request for _ in range(n_phrasings))
    else:
        request, noun = request_phrase(tool.name, tool.description)
        notes["request"] = request
        shown = {k: (notes.get("wrong_value", {}).get(k, v)) for k, v in facts.items() if k in opening_facts}
        goal = f"You want to {request} ({tool.description.split('.')[0].lower()})."
        texts = phrasings(cell["stance"], cell["history"], request, noun, shown, n=n_phrasings, gen=gen)
    return Situation(
        situation_id=situation_id, seed=seed, domain=domain.name, cell=dict(cell), split=split, goal=goal,
        intent_tool=tool.name if tool else None, entity=entity.name if entity else None, entity_id=entity_id,
        facts={k: str(v) for k, v in facts.items()}, opening_facts=tuple(opening_facts), expect_write=expect_write,
        effect=effect, setup=WorldSetup(tuple(upserts), (), tuple(masked), fault), phrasings=texts,
        source=source, notes=notes,
    )


def _opening_facts(cell: dict[str, str], tool: Tool | None, entity: Entity | None, facts: dict[str, Any]) -> list[str]:
    if tool is None or cell["stance"] == "ambiguous":
        return []
    hidden_id = cell["tool"] == MULTI_TOOL or cell["world_state"] in ID_FREE_STATES
    names = [k for k in facts if not (hidden_id and entity is not None and k == entity.id_argument)]
    if cell["stance"] in ("unsure", "exploratory"):
        return names[:1]
    return names


def split_of(situation_id: str, heldout_share: float) -> str:
    """heldout or train, by a stable hash of the situation id (the same under every policy version)."""
    return "heldout" if rng("split", situation_id).random() < heldout_share else "train"


def build_situations(domain: Domain, state: State, cells: pd.DataFrame, *, seed: int, n_phrasings: int,
                     heldout_share: float = defaults.HELDOUT_SHARE, options: WorldOptions | None = None) -> pd.DataFrame:
    """One situation per planned cell, split held-out/train, as a table."""
    rows = []
    for cell in cells[list(AXES)].to_dict("records"):
        situation_id = short_id(domain.name, seed, [cell[a] for a in AXES], 0)
        situation = build_situation(domain, state, cell, seed=seed, split=split_of(situation_id, heldout_share),
                                    n_phrasings=n_phrasings, options=options)
        rows.append(situation.to_row())
    return pd.DataFrame(rows).sort_values("situation_id", kind="stable").reset_index(drop=True)
