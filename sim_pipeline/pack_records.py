"""The team's own records: `records/<entity>.jsonl` in a domain pack (a staging dump, a fixture set).

The world starts each such entity's table from these records instead of drawing it, and draws more only to reach
`WorldOptions.records_per_entity` (situations pick from both). Every record is checked when the pack loads, and any
problem names the file, the line and the field: a file for no entity, a line that is not one JSON object, a missing or
repeated id or one off the entity's `id_pattern`, a key that is no field of the entity, a value its field's kind does
not allow (an enum value, a number, a date, a list or object against its schema), a link or a reference to a record
that no shipped file holds (a record the world would draw has an id no file can know).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import jsonschema

from sim_pipeline import json_schema
from sim_pipeline.definition_files import parse_json, read_definition
from sim_pipeline.domain import Domain, Entity, FieldSpec
from sim_pipeline.errors import DomainPackError

RECORDS_DIR = "records"
Records = dict[str, tuple[dict[str, Any], ...]]  # entity name -> its shipped records, file order


def _fail(path: Path, line: int | None, where: str, problem: str, fix: str) -> DomainPackError:
    at = f"line {line}: " if line else ""
    return DomainPackError(f"{path}: {at}{where}: {problem}. Fix: {fix}")


def _problem(spec: FieldSpec, value: Any) -> str | None:
    """Why a value does not fit its field's kind, or None."""
    if value is None:
        return None
    if spec.kind == "enum" and spec.values and value not in spec.values:
        return f"{value!r} is not one of {list(spec.values)}"
    if spec.kind in ("money", "integer") and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return f"{value!r} is not a number"
    if spec.kind == "integer" and isinstance(value, float) and not value.is_integer():
        return f"{value!r} is not a whole number"
    if spec.kind == "date":
        try:
            dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return f"{value!r} is not an ISO date (YYYY-MM-DD)"
    if spec.kind == "schema":
        error = jsonschema.exceptions.best_match(json_schema.validator(json.loads(spec.values[0])).iter_errors(value))
        if error is not None:
            return f"does not fit its schema ({error.message})"
    return None


def _read(path: Path, entity: Entity) -> list[tuple[int, dict[str, Any]]]:
    fields = {f.name: f for f in entity.fields}
    out: list[tuple[int, dict[str, Any]]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(read_definition(path, DomainPackError).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = parse_json(line)
        except ValueError as exc:
            raise _fail(path, number, "record", f"not JSON ({exc})", "write one JSON object per line") from None
        if not isinstance(record, dict):
            raise _fail(path, number, "record", "not a JSON object", "write one JSON object per line")
        key = record.get(entity.id_argument)
        if key is None:
            raise _fail(path, number, f"field '{entity.id_argument}'", "missing", f"give every {entity.name} its id")
        if entity.id_pattern and not json_schema.search(entity.id_pattern, str(key)):
            raise _fail(path, number, f"field '{entity.id_argument}'", f"{key!r} does not match the id pattern "
                        f"{entity.id_pattern}", "write ids in the entity's shape")
        if str(key) in seen:
            raise _fail(path, number, f"field '{entity.id_argument}'", f"{key!r} again (first on line "
                        f"{seen[str(key)]})", "give each record its own id")
        seen[str(key)] = number
        for name, value in record.items():
            if name == entity.id_argument:
                continue
            if name not in fields:
                raise _fail(path, number, f"field '{name}'", f"not a field of {entity.name}",
                            f"use the entity's fields {sorted(fields)} (or declare it under entities:)")
            problem = _problem(fields[name], value)
            if problem is not None:
                raise _fail(path, number, f"field '{name}'", problem, f"write a value {entity.name}.{name} allows")
        out.append((number, record))
    return out


def load_records(pack: Path, domain: Domain) -> Records:
    """Every `records/<entity>.jsonl` of a pack, checked (see the module); an empty mapping when there are none."""
    folder = pack / RECORDS_DIR
    entities = {e.name: e for e in domain.entities}
    read: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else ():
        if path.stem not in entities:
            raise _fail(path, None, "file", f"no entity '{path.stem}'", f"name the file after an entity: "
                        f"{sorted(entities)}")
        read[path.stem] = _read(path, entities[path.stem])
    ids = {name: {str(r[entities[name].id_argument]) for _, r in rows} for name, rows in read.items()}
    for name, rows in read.items():
        path = folder / f"{name}.jsonl"
        for field, target in sorted(entities[name].links().items()):
            for number, record in rows:
                if record.get(field) is not None and str(record[field]) not in ids.get(target, set()):
                    raise _fail(path, number, f"field '{field}'", f"links to {target} {record[field]!r}, which no "
                                f"{RECORDS_DIR}/{target}.jsonl holds", f"ship that {target} in {RECORDS_DIR}/"
                                f"{target}.jsonl, or link to one it holds")
        for reference in (r for r in domain.references if r.owner in ("*", name)):
            _check_reference(path, domain, reference, rows, read, entities)
    return {name: tuple(r for _, r in rows) for name, rows in read.items()}


def _check_reference(path: Path, domain: Domain, reference: Any, rows: list[tuple[int, dict[str, Any]]],
                     read: dict[str, list[tuple[int, dict[str, Any]]]], entities: dict[str, Entity]) -> None:
    """A shipped record's reference values must name shipped records (the world never changes the team's records)."""
    from sim_pipeline.world import references  # world/ builds on the domain: imported where it is used

    state = {name: {str(r[entities[name].id_argument]): r for _, r in rs} for name, rs in read.items()}
    for number, record in rows:
        if references.missing(domain, (reference,), record, state) is not None or (
                reference.target not in state and any(True for _ in references.walk(record, reference.path))):
            where = references.missing(domain, (reference,), record, state) or "/".join(reference.path)
            raise _fail(path, number, f"field '{where}'", f"names no {reference.target} that a {RECORDS_DIR} file "
                        f"holds ({reference.text})", f"ship it in {RECORDS_DIR}/{reference.target}.jsonl, or "
                        "name one shipped there")
