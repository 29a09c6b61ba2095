"""Reads of the sandbox world: one record by id, records by lookup, masked fields, open-world records.

Both reads come from the same tables, so the record `get_order` shows is the one `list_orders` lists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from sim_pipeline import defaults
from sim_pipeline.domain import Domain, Entity
from sim_pipeline.seeding import rng
from sim_pipeline.world.infer import is_synthetic, plural, snake
from sim_pipeline.world.options import WorldOptions
from sim_pipeline.protocol.statuses import UNKNOWN_VALUE
from sim_pipeline.world.state import VERSION_FIELD, State, new_id, record_key
from sim_pipeline.world.values import draw_value

if TYPE_CHECKING:
    from sim_pipeline.world.arguments import CompiledTool


def same(value: Any, given: Any) -> bool:
    """Whether a stored value equals what a call gave, as services compare text: case-insensitively."""
    return str(value).lower() == str(given).lower()


class Reader:
    """The read side of `Sandbox` (a mixin: it uses the sandbox's tables, masks, seed and log)."""

    domain: Domain
    seed: int
    options: WorldOptions
    open_world: bool
    state: State
    _masked: dict[tuple[str, str], set[str]]
    _deleted: set[tuple[str, str]]

    def _log(self, name: str, args: dict[str, Any], result: dict[str, Any], *, entity: str | None = None,
             entity_id: str | None = None, applied: bool = False) -> dict[str, Any]:
        raise NotImplementedError

    def _visible(self, entity: str, key: str, record: dict[str, Any]) -> dict[str, Any]:
        """A record as tools show it: masked fields read `unknown`, keys in name order."""
        masked = self._masked.get((entity, key), ())
        return {k: (UNKNOWN_VALUE if k in masked else v) for k, v in sorted(record.items())}

    def _draw_record(self, ent: Entity, id_value: Any, gen: np.random.Generator, lookup: Any = None) -> dict[str, Any]:
        record = {ent.id_argument: id_value}
        for spec in ent.fields:
            record[spec.name] = lookup if spec.name == ent.lookup_by and lookup is not None else draw_value(
                spec, gen, self.options)
        record[VERSION_FIELD] = 1
        return record

    def _lookup(self, ent: Entity, key: str, id_value: Any) -> dict[str, Any] | None:
        """The record with this id; in an open world an unseen id exists with probability `exists_share`."""
        table = self.state.setdefault(ent.name, {})
        record = table.get(key)
        if record is not None or not self.open_world or (ent.name, key) in self._deleted or is_synthetic(
                self.domain, ent.name):
            return record
        if float(rng(self.seed, "exists", ent.name, key).random()) >= self.options.exists_share:
            return None
        table[key] = self._draw_record(ent, id_value, rng(self.seed, "record", ent.name, key))
        return table[key]

    def _hits(self, ent: Entity, value: Any) -> None:
        """Open world: an unseen lookup value finds 1..n records (`search_hits`) with probability `exists_share`."""
        table = self.state.setdefault(ent.name, {})
        if any(same(r.get(ent.lookup_by), value) for r in table.values()):
            return
        gen = rng(self.seed, "hits", ent.name, str(value).lower())
        if float(gen.random()) >= self.options.exists_share:
            return
        low, high = self.options.search_hits
        for _ in range(int(gen.integers(low, high + 1))):
            made = new_id(self.domain, ent.name, gen, self.options, table)
            if made is not None:
                table[record_key(made)] = self._draw_record(ent, made, gen, lookup=value)

    def _matches(self, ent: Entity, args: dict[str, Any], *, lookup_only: bool = False
                 ) -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
        """The filters a call gives and the records matching all of them.

        A read filters by every entity field it is given and a free-text query; a write without an id names its
        record by the lookup field alone (its other arguments are the new values).
        """
        names = {ent.lookup_by} if lookup_only else {f.name for f in ent.fields}
        filters = {k: v for k, v in args.items() if k in names and k != ent.id_argument}
        query = next((str(v).lower() for k, v in args.items() if snake(k) in defaults.WORLD_QUERY_ARGUMENTS), None)
        if self.open_world and ent.lookup_by in filters:
            self._hits(ent, filters[ent.lookup_by])
        rows = [(k, r) for k, r in sorted(self.state.get(ent.name, {}).items())
                if all(same(r.get(f), v) for f, v in filters.items())
                and (query is None or query in " ".join(str(v) for v in r.values()).lower())]
        return ({**filters, "query": query} if query is not None else filters), rows

    def _read_one(self, compiled: CompiledTool, args: dict[str, Any], ent: Entity, key: str,
                  record: dict[str, Any]) -> dict[str, Any]:
        tool = compiled.tool
        if tool.kind == "verify":
            # A verify tool checks what the caller states against the record, and shows nothing of it.
            checks = {k: v for k, v in args.items() if k != compiled.binding.id_argument}
            result = {"status": "ok", "verified": all(same(record.get(k, ""), v) for k, v in checks.items())}
        else:
            result = {"status": "ok", ent.name: self._visible(ent.name, key, record)}
        return self._log(tool.name, args, result, entity=ent.name, entity_id=key)

    def _read_many(self, compiled: CompiledTool, args: dict[str, Any], ent: Entity,
                   rows: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        listed = [self._visible(ent.name, k, r) for k, r in rows]
        return self._log(compiled.tool.name, args, {"status": "ok", plural(ent.name): listed, "count": len(listed)},
                         entity=ent.name)
