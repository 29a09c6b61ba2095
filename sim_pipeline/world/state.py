"""The seeded world state: entity tables drawn from the domain's entity specs, deterministic per seed."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.domain import Domain, Entity, FieldSpec
from sim_pipeline.errors import WorldError
from sim_pipeline.seeding import canonical_json, rng
from sim_pipeline.world import references
from sim_pipeline.world.infer import id_schema, is_synthetic
from sim_pipeline.world.options import WorldOptions
from sim_pipeline.world.values import draw_entity_id, draw_person, draw_value

__all__ = ["State", "build_state", "draw_id", "draw_person", "draw_value", "new_id", "record_key", "state_from_table",
           "state_table"]

State = dict[str, dict[str, dict[str, Any]]]  # entity name -> id (as text) -> record
VERSION_FIELD = "version"  # every record carries one: 1 when drawn or created, +1 per update


def record_key(value: Any) -> str:
    """The table key of an id value: its text, with 48213.0 read as 48213 (JSON numbers may come either way)."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def draw_id(gen: np.random.Generator, options: WorldOptions, taken: set[str] | dict[str, Any]) -> str:
    """A fresh numeric id in the id range that is not taken."""
    low, high = options.id_range
    for _ in range(defaults.WORLD_ID_DRAW_TRIES):
        candidate = str(int(gen.integers(low, high)))
        if candidate not in taken:
            return candidate
    free = next((str(i) for i in range(low, high) if str(i) not in taken), None)  # a crowded range: first free id
    if free is None:
        raise WorldError(f"WorldOptions.id_range={options.id_range} has no free id left. Fix: widen the id range")
    return free


def new_id(domain: Domain, entity: str, gen: np.random.Generator, options: WorldOptions,
           taken: set[str] | dict[str, Any]) -> str | int | None:
    """A fresh id for one entity, shaped like its id argument (None when an enum of ids is used up)."""
    schema = id_schema(domain, entity)
    return draw_id(gen, options, taken) if schema is None else draw_entity_id(schema, gen, options, taken)


def draw_field(spec: FieldSpec, gen: np.random.Generator, options: WorldOptions, state: State) -> Any:
    """One field value; a link holds the id of an existing record of its entity (drawn when there is none)."""
    if spec.kind == "link" and state.get(spec.values[0]):
        keys = sorted(state[spec.values[0]])
        return keys[int(gen.integers(len(keys)))]
    return draw_value(spec, gen, options)


def link_order(domain: Domain) -> list[Entity]:
    """Entities with every linked entity before the ones that link to it (a cycle keeps declaration order)."""
    done: list[Entity] = []
    pending = list(domain.entities)
    while pending:
        ready = [e for e in pending if all(t in {d.name for d in done} or t == e.name or t not in
                                           {p.name for p in pending} for t in e.links().values())] or pending[:1]
        done.append(ready[0])
        pending.remove(ready[0])
    return done


def _entity_records(domain: Domain, entity: Entity, seed: int, options: WorldOptions,
                    state: State) -> dict[str, dict[str, Any]]:
    gen = rng(seed, "world", entity.name)
    records: dict[str, dict[str, Any]] = {}
    if not entity.fields and is_synthetic(domain, entity.name):
        return records  # an event log (sent messages, payments) starts empty
    for shipped in domain.records.get(entity.name, ()):  # the team's own records first (pack_records.py)
        records[record_key(shipped[entity.id_argument])] = {VERSION_FIELD: 1, **dict(shipped)}
    lookup_spec = next((f for f in entity.fields if f.name == entity.lookup_by), None)
    while len(records) < options.records_per_entity:
        # Records come in groups sharing one lookup value (a customer with several orders): the search hit count.
        hits = int(gen.integers(options.search_hits[0], options.search_hits[1] + 1)) if lookup_spec else 1
        shared = draw_field(lookup_spec, gen, options, state) if lookup_spec else None
        for _ in range(min(hits, options.records_per_entity - len(records))):
            record_id = new_id(domain, entity.name, gen, options, records)
            if record_id is None:
                return records  # the id space is used up
            record: dict[str, Any] = {entity.id_argument: record_id}
            for spec in entity.fields:
                record[spec.name] = shared if spec is lookup_spec else draw_field(spec, gen, options, state)
            record[VERSION_FIELD] = 1
            records[record_key(record_id)] = record
    return records


def build_state(domain: Domain, seed: int, options: WorldOptions | None = None) -> State:
    """The seeded entity tables of a domain for one seed."""
    options = options or WorldOptions()
    state: State = {}
    for entity in link_order(domain):  # linked records first: a link points at a record that exists
        state[entity.name] = _entity_records(domain, entity, seed, options, state)
    for entity in domain.entities:  # nested values that name records: settled once every table is drawn
        bound = tuple(r for r in domain.references if r.owner in ("*", entity.name))
        gen = rng(seed, "references", entity.name)
        shipped = {record_key(r[entity.id_argument]) for r in domain.records.get(entity.name, ())}
        for key in sorted(state[entity.name]) if bound else ():
            if key not in shipped:  # the team's records are kept as they are (checked when the pack loads)
                references.settle(domain, bound, state[entity.name][key], state, gen)
    return {e.name: state[e.name] for e in domain.entities}


def state_table(state: State) -> pd.DataFrame:
    """The state as one long table: entity, entity_id, record (canonical JSON: entities differ in shape)."""
    rows = [
        {"entity": entity, "entity_id": record_id, "record": canonical_json(record)}
        for entity, records in sorted(state.items())
        for record_id, record in sorted(records.items())
    ]
    return pd.DataFrame(rows, columns=["entity", "entity_id", "record"])


def state_from_table(table: pd.DataFrame) -> State:
    """Rebuild the state tables from the world asset's long table."""
    state: State = {}
    for entity, record_id, record in table[["entity", "entity_id", "record"]].itertuples(index=False):
        state.setdefault(entity, {})[record_id] = json.loads(record)
    return state
