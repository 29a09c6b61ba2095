"""References inside nested data: a value at some path of a record or a call's arguments names another record.

domain.yaml declares them under `references:` (Domain.references), one line each:

    reservation.flights[].flight_number -> flight
    "*.payment_methods[].payment_id -> user.payment_methods[].payment_id"

The left side is an owner (an entity: its records and the arguments of the tools that act on it; a tool: its
arguments; `*`: every record and every call) and a path (`.` between keys, `[]` for every item of a list). The right
side is the entity whose record the value names (by its id), or a path inside the record of that entity which the
same object links to (`user.payment_methods[].payment_id`: one of the user's own payment ids, the user being the one
its `user_id` names).

The world keeps them true (`settle`: drawn records and the user's facts name records that exist, and an item's other
fields that the named record also has, such as a flight's date, are copied from it), and refuses a write that breaks
one (`missing`: not_found, with the path of the first value that names nothing).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim_pipeline.domain import Domain, Reference, Tool

Found = tuple[str, Any, dict[str, Any] | list[Any], Any]  # (path as text, value, container, key or index)


def walk(value: Any, path: tuple[str, ...], where: str = "") -> Iterator[Found]:
    """Every place a path reaches in a value: its text path, the value there, and the container and key holding it."""
    if not path:
        return
    head, rest = path[0], path[1:]
    many = head.endswith("[]")
    key = head[:-2] if many else head
    if not isinstance(value, dict) or key not in value:
        return
    here = f"{where}/{key}" if where else key
    if many:
        items = value[key] if isinstance(value[key], list) else []
        for i, item in enumerate(items):
            if rest:
                yield from walk(item, rest, f"{here}/{i}")
            else:
                yield f"{here}/{i}", item, items, i
    elif rest:
        yield from walk(value[key], rest, here)
    else:
        yield here, value[key], value, key


def _container(value: Any, path: tuple[str, ...]) -> Iterator[dict[str, Any]]:
    """The objects holding the last key of a path (a list item `{flight_number, date}` for `flights[].flight_number`)."""
    for _, _, container, _ in walk(value, path):
        if isinstance(container, dict):
            yield container


def applies(reference: Reference, *, entity: str | None = None, tool: Tool | None = None,
            tool_entity: str | None = None) -> bool:
    """Whether a reference binds the records of `entity`, or the arguments of `tool` (acting on `tool_entity`)."""
    if reference.owner == "*":
        return True
    if entity is not None:
        return reference.owner == entity
    return tool is not None and reference.owner in (tool.name, tool_entity)


def allowed(domain: Domain, reference: Reference, holder: Mapping[str, Any], state: Mapping[str, Any],
            acted_on: Mapping[str, Any] | None = None) -> set[str] | None:
    """The values a reference may take in one object: the ids of the target entity's records, or the values at the
    target path inside the record the object links to, or else the record a call acts on links to (None: neither
    names such a record, so nothing binds)."""
    target = next((e for e in domain.entities if e.name == reference.target), None)
    if target is None:
        return None
    records = state.get(target.name, {})
    if not reference.within:
        return {str(k) for k in records}
    owner = holder if target.id_argument in holder else acted_on or {}
    parent = records.get(str(owner.get(target.id_argument))) if target.id_argument in owner else None
    if parent is None:
        return None
    return {str(v) for _, v, _, _ in walk(parent, reference.within)}


def missing(domain: Domain, references: tuple[Reference, ...], arguments: Mapping[str, Any],
            state: Mapping[str, Any], acted_on: Mapping[str, Any] | None = None) -> str | None:
    """The path of the first value in a call's arguments that names no record (None: every one names one)."""
    for reference in references:
        for where, value, _, _ in walk(dict(arguments), reference.path):
            ok = allowed(domain, reference, arguments, state, acted_on)
            if ok is not None and str(value) not in ok:
                return where
    return None


@dataclass(frozen=True)
class Settled:
    """How many reference values settling changed (drawn values that named nothing), for the world-fit report."""

    changed: int


def settle(domain: Domain, references: tuple[Reference, ...], holder: dict[str, Any], state: Mapping[str, Any],
           gen: np.random.Generator, acted_on: Mapping[str, Any] | None = None) -> Settled:
    """Make every reference value in `holder` (a record, or the user's facts for a call on `acted_on`) name a record
    that exists, and copy the named record's fields its item shares (a flight's date). Deterministic given `gen`;
    in place."""
    changed = 0
    for reference in references:
        ok = allowed(domain, reference, holder, state, acted_on)
        if not ok:
            continue
        choices = sorted(ok)
        for _, value, container, key in list(walk(holder, reference.path)):
            if str(value) not in ok:
                container[key] = _like(value, choices[int(gen.integers(len(choices)))])
                changed += 1
        _copy_shared(domain, reference, holder, state)
    return Settled(changed)


def _like(old: Any, new: str) -> Any:
    """A chosen id in the type the old value had (an integer id stays an integer)."""
    if isinstance(old, int) and not isinstance(old, bool) and new.lstrip("-").isdigit():
        return int(new)
    return new


def _copy_shared(domain: Domain, reference: Reference, holder: dict[str, Any], state: Mapping[str, Any]) -> None:
    """An item's fields that the named record also has take the record's values (the date of the flight named)."""
    target = next((e for e in domain.entities if e.name == reference.target), None)
    if target is None or reference.within:
        return
    last = reference.path[-1]
    for item in _container(holder, reference.path):
        named = state.get(target.name, {}).get(str(item.get(last)))
        for key in item if named is not None else ():
            if key != last and key in named and not isinstance(named[key], (dict, list)):
                item[key] = named[key]
