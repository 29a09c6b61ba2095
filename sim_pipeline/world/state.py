"""The seeded world state: entity tables drawn from the domain's entity specs, deterministic per seed."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pandas as pd

from sim_pipeline.domain import Domain, Entity, FieldSpec
from sim_pipeline.seeding import canonical_json, rng
from sim_pipeline.world.options import WorldOptions

State = dict[str, dict[str, dict[str, Any]]]  # entity name -> id -> record


def draw_person(gen: np.random.Generator, options: WorldOptions) -> tuple[str, str]:
    """A (full name, email) pair from the name pools."""
    first = options.first_names[gen.integers(len(options.first_names))]
    last = options.last_names[gen.integers(len(options.last_names))]
    domain = options.email_domains[gen.integers(len(options.email_domains))]
    return f"{first.title()} {last.title()}", f"{first}.{last}{gen.integers(10, 99)}@{domain}"


def draw_value(spec: FieldSpec, gen: np.random.Generator, options: WorldOptions) -> Any:
    """One value for a field of the given kind."""
    if spec.kind == "enum":
        return spec.values[gen.integers(len(spec.values))]
    if spec.kind == "money":
        low, high = spec.low or 1.0, spec.high or 1000.0
        return round(float(gen.uniform(low, high)), 2)
    if spec.kind == "integer":
        return int(gen.integers(int(spec.low or 0), int(spec.high or 100) + 1))
    if spec.kind == "date":
        start, end = (dt.date.fromisoformat(d) for d in options.date_range)
        return (start + dt.timedelta(days=int(gen.integers((end - start).days + 1)))).isoformat()
    if spec.kind in ("email", "name"):
        name, email = draw_person(gen, options)
        return email if spec.kind == "email" else name
    if spec.kind == "address":
        street = options.streets[gen.integers(len(options.streets))]
        return f"{gen.integers(1, 999)} {street}"
    return spec.values[gen.integers(len(spec.values))] if spec.values else f"note {gen.integers(1000)}"


def draw_id(gen: np.random.Generator, options: WorldOptions, taken: set[str] | dict[str, Any]) -> str:
    """A fresh numeric id in the id range that is not taken."""
    low, high = options.id_range
    while True:
        candidate = str(int(gen.integers(low, high)))
        if candidate not in taken:
            return candidate


def _entity_records(entity: Entity, seed: int, options: WorldOptions) -> dict[str, dict[str, Any]]:
    gen = rng(seed, "world", entity.name)
    records: dict[str, dict[str, Any]] = {}
    lookup_spec = next((f for f in entity.fields if f.name == entity.lookup_by), None)
    while len(records) < options.records_per_entity:
        # Records come in groups sharing one lookup value (a customer with several orders): the search hit count.
        hits = int(gen.integers(options.search_hits[0], options.search_hits[1] + 1)) if lookup_spec else 1
        shared = draw_value(lookup_spec, gen, options) if lookup_spec else None
        for _ in range(min(hits, options.records_per_entity - len(records))):
            record_id = draw_id(gen, options, records)
            record: dict[str, Any] = {entity.id_argument: record_id}
            for spec in entity.fields:
                record[spec.name] = shared if spec is lookup_spec else draw_value(spec, gen, options)
            records[record_id] = record
    return records


def build_state(domain: Domain, seed: int, options: WorldOptions | None = None) -> State:
    """The seeded entity tables of a domain for one seed."""
    options = options or WorldOptions()
    return {e.name: _entity_records(e, seed, options) for e in domain.entities}


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
    import json

    state: State = {}
    for entity, record_id, record in table[["entity", "entity_id", "record"]].itertuples(index=False):
        state.setdefault(entity, {})[record_id] = json.loads(record)
    return state
