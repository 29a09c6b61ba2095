"""The sandbox world: tools answer from schema-shaped state, deterministically, with scheduled faults.

`Sandbox(tools, *, seed, options, situation)` takes a domain pack's `Domain` or a bare list of OpenAI function
schemas (entities are then inferred, see `world/infer.py`). `call` never raises; every result is a JSON object with
a `status` from STATUSES. Call order: unknown tool, missing required, invalid argument, placeholder argument
(all `rejected`), then the scheduled fault, then the answer from state.

With a situation (or a setup) the world is closed: only seeded and set-up records exist. Without one it is open:
an id or lookup value nobody has seen exists with probability `options.exists_share`, drawn from a hash of the
world seed, the entity and the value, so it is the same record from every tool and in every process.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sim_pipeline.domain import Action, Domain, Entity
from sim_pipeline.errors import WorldError
from sim_pipeline.seeding import rng
from sim_pipeline.world import faults
from sim_pipeline.world.arguments import CompiledTool, as_object, compiled_tools, rejection
from sim_pipeline.world.compute import compute_result
from sim_pipeline import defaults, expressions
from sim_pipeline.world import references
from sim_pipeline.world.infer import default_action, infer_domain
from sim_pipeline.world.options import WorldOptions
from sim_pipeline.world.reads import Reader
from sim_pipeline.protocol.statuses import UNKNOWN_VALUE
from sim_pipeline.world.setup import FAULT_STATUS, PENDING_FIELD, Fault, WorldSetup
from sim_pipeline.world.state import VERSION_FIELD, State, build_state, new_id, record_key

if TYPE_CHECKING:
    from sim_pipeline.situation import Situation

__all__ = ["ERRORS", "FAULT_STATUS", "PENDING_FIELD", "STATUSES", "UNKNOWN_VALUE", "Event", "Fault", "Sandbox",
           "WorldSetup", "default_action"]

STATUSES = (
    "ok", "created", "updated", "deleted", "not_found", "rejected", "already_done",
    "timeout", "malformed", "stale", "permission_denied", "rate_limited", "partial_write",
)
ERRORS = (
    "missing_required", "invalid_argument", "placeholder_argument",  # the arguments
    "unknown_tool", "invalid_state", "state_unknown", "ambiguous", "no_free_id", "invalid_expression",  # the world
    "world_error",
)  # the `error` of a rejected result
APPLIED = ("created", "updated", "deleted")  # statuses of a write that changed the world


@dataclass(frozen=True)
class Event:
    """One tool call and what the world answered."""

    index: int
    tool: str
    arguments: dict[str, Any]
    status: str
    entity: str | None = None
    entity_id: str | None = None
    applied: bool = False
    result: dict[str, Any] = field(default_factory=dict)


class Sandbox(Reader):
    """A stateful world for one conversation: `call` never raises, every result has a `status`.

    Args:
        tools: a domain pack (`Domain`) or a list of OpenAI function schemas.
        seed: the world seed; the same seed and calls give the same results, byte for byte.
        options: the world's dials.
        situation: the situation played; its `setup` (records, masks, the fault) is applied.
        setup: a setup given directly (the rollout runner passes the situation's).
        state: seeded tables to start from (the `world` asset's), instead of drawing them from `seed`.
    """

    def __init__(self, tools: Domain | Sequence[Mapping[str, Any]], *, seed: int, options: WorldOptions | None = None,
                 situation: Situation | None = None, setup: WorldSetup | None = None,
                 state: State | None = None) -> None:
        self.domain = tools if isinstance(tools, Domain) else infer_domain(list(tools))
        self.seed = int(seed)
        self.options = options or WorldOptions()
        self.setup = setup or (situation.setup if situation is not None else WorldSetup())
        self.open_world = situation is None and setup is None
        self._book = compiled_tools(self.domain)
        faults.check_fault(self.setup.fault, set(self._book), self.options)
        self._base = state if state is not None else build_state(self.domain, self.seed, self.options)
        # Copy on write: tables are copied now, a record only when a write changes it.
        self.state: State = {e.name: dict(self._base.get(e.name, {})) for e in self.domain.entities}
        self._entities = {e.name: e for e in self.domain.entities}
        self._deleted: set[tuple[str, str]] = set()
        for entity, record in self.setup.upserts:
            ent = self._entity(entity)
            self.state[entity][record_key(record[ent.id_argument])] = dict(record)
        for entity, record_id in self.setup.deletes:
            self.state[self._entity(entity).name].pop(record_id, None)
            self._deleted.add((entity, record_id))
        self._masked = {(e, i): set(f) for e, i, f in self.setup.masked}
        self._calls_of: dict[str, int] = {}
        self._faulted = 0
        self.events: list[Event] = []
        self.compute_errors: list[str] = []  # computed values (actions' `computes:`) the data could not give

    @classmethod
    def from_tools(cls, tools: Sequence[Mapping[str, Any]], *, seed: int, options: WorldOptions | None = None,
                   situation: Situation | None = None) -> Sandbox:
        """A sandbox over bare OpenAI function schemas, entities inferred from them."""
        return cls(list(tools), seed=seed, options=options, situation=situation)

    @property
    def tools(self) -> list[dict[str, Any]]:
        """The tools as the OpenAI `tools=` list."""
        return self.domain.tool_schemas

    # -- public ---------------------------------------------------------------------------------------------------
    def call(self, name: str, arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
        """Run one tool call against the world and return its result (never raises)."""
        try:
            args = as_object(arguments)
        except (ValueError, TypeError) as exc:
            return self._log(str(name), {}, {"status": "rejected", "error": "invalid_argument", "field": "arguments",
                                             "fields": ["arguments"], "message": f"arguments: not a JSON object ({exc})"})
        try:
            return self._call(str(name), args)
        except Exception as exc:  # noqa: BLE001 -- a world bug must not end the rollout: it becomes a result
            return self._log(str(name), args, {"status": "rejected", "error": "world_error",
                                               "message": f"{type(exc).__name__}: {exc}"})

    def snapshot(self) -> State:
        """A deep copy of the current state tables (entity -> id -> record)."""
        return json.loads(json.dumps(self.state))

    # -- dispatch -------------------------------------------------------------------------------------------------
    def _entity(self, name: str) -> Entity:
        if name not in self._entities:
            raise WorldError(f"world setup names entity '{name}'. Fix: use one of {sorted(self._entities)}")
        return self._entities[name]

    def _log(self, name: str, args: dict[str, Any], result: dict[str, Any], *, entity: str | None = None,
             entity_id: str | None = None, applied: bool = False) -> dict[str, Any]:
        self.events.append(Event(len(self.events), name, args, result["status"], entity, entity_id, applied, result))
        return result

    def _call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        compiled = self._book.get(name)
        if compiled is None:
            return self._log(name, args, {"status": "rejected", "error": "unknown_tool",
                                          "message": f"no tool named '{name}'; the tools are {sorted(self._book)}"})
        bad = rejection(compiled, args)
        if bad is not None:
            return self._log(name, args, bad)
        nth = self._calls_of.get(name, 0)
        self._calls_of[name] = nth + 1
        if faults.fires(self.setup.fault, name, seed=self.seed, nth_call=nth, used=self._faulted):
            self._faulted += 1
            return self._fault(compiled, args, self.setup.fault)  # type: ignore[arg-type]
        return self._answer(compiled, args)

    def _answer(self, compiled: CompiledTool, args: dict[str, Any]) -> dict[str, Any]:
        tool, binding = compiled.tool, compiled.binding
        ent = binding.entity
        if tool.writes and compiled.references:
            acted_on = self.state.get(ent.name, {}).get(record_key(args[binding.id_argument])) \
                if ent is not None and binding.id_argument in args else None
            where = references.missing(self.domain, compiled.references, args, self.state, acted_on)
            if where is not None:  # anywhere in the arguments, a value that names no record
                return self._log(tool.name, args, {"status": "not_found", "path": where,
                                                   "message": f"{where} names no record that exists"},
                                 entity=ent.name if ent is not None else None)
        if ent is None:
            if tool.writes:
                return self._event(compiled, args, None)
            if tool.kind == "compute":
                return self._log(tool.name, args, compute_result(args, compiled.properties))
            if tool.kind == "transfer":
                return self._log(tool.name, args, {"status": "ok", "transferred": True,
                                                   "message": "the conversation is handed to a human agent"})
            return self._log(tool.name, args, {"status": "ok", "result": dict(sorted(args.items()))})
        if binding.id_argument is not None and binding.id_argument in args:
            key = record_key(args[binding.id_argument])
            record = self._lookup(ent, key, args[binding.id_argument])
            gone = (ent.name, key) in self._deleted
            if tool.kind == "create":
                if record is not None or gone:
                    return self._log(tool.name, args, {"status": "already_done", "message": f"{ent.name} {key} "
                                                       "already exists"}, entity=ent.name, entity_id=key)
                return self._create(compiled, args, ent, given=args[binding.id_argument])
            if record is None:
                if gone and compiled.tool.writes and self._deletes(compiled):
                    return self._log(tool.name, args, {"status": "already_done", "message": f"{ent.name} {key} "
                                                       "was already deleted"}, entity=ent.name, entity_id=key)
                return self._log(tool.name, args, {"status": "not_found", "message": f"no {ent.name} with id {key}"},
                                 entity=ent.name, entity_id=key)
            if not tool.writes:
                return self._read_one(compiled, args, ent, key, record)
            return self._write(compiled, args, ent, key, record)
        if compiled.makes_record:
            return self._event(compiled, args, ent)
        filters, rows = self._matches(ent, args, lookup_only=tool.writes)
        if not tool.writes:
            return self._read_many(compiled, args, ent, rows)
        if not filters:  # the lookup field is optional and was not given: nothing names a record
            return self._log(tool.name, args, {"status": "rejected", "error": "missing_required",
                                               "fields": [ent.lookup_by], "message": f"name the {ent.name} by "
                                               f"{ent.lookup_by}"}, entity=ent.name)
        if len(rows) != 1:
            if not rows:
                return self._log(tool.name, args, {"status": "not_found", "message": f"no {ent.name} with {filters}"},
                                 entity=ent.name)
            return self._log(tool.name, args, {"status": "rejected", "error": "ambiguous", "matches": [k for k, _ in rows],
                                               "message": f"{len(rows)} {ent.name} records match {filters}; "
                                               f"give the {ent.id_argument}"}, entity=ent.name)
        return self._write(compiled, args, ent, rows[0][0], rows[0][1])

    # -- writes ---------------------------------------------------------------------------------------------------
    def _deletes(self, compiled: CompiledTool) -> bool:
        return compiled.tool.kind == "delete"

    def _effect(self, action: Action, args: dict[str, Any]) -> dict[str, Any]:
        return {k: (args[v[1:]] if v.startswith("$") else v) for k, v in action.sets.items()
                if not v.startswith("$") or v[1:] in args}

    def _write(self, compiled: CompiledTool, args: dict[str, Any], ent: Entity, key: str, record: dict[str, Any],
               *, partial: bool = False) -> dict[str, Any]:
        name, action = compiled.tool.name, compiled.action
        effect = self._effect(action, args)
        where = {"entity": ent.name, "entity_id": key}
        if self._masked.get((ent.name, key), set()) & (set(action.requires) | set(effect)):
            return self._log(name, args, {"status": "rejected", "error": "state_unknown",
                                          "message": f"the state of {ent.name} {key} cannot be determined"}, **where)
        deleting = self._deletes(compiled)
        if effect and not deleting and all(record.get(k) == v for k, v in effect.items()):
            return self._log(name, args, {"status": "already_done", "message": f"{ent.name} {key} already "
                                          + ", ".join(f"{k}={v}" for k, v in effect.items())}, **where)
        blocked = {k: record.get(k) for k, allowed in action.requires.items() if record.get(k) not in allowed}
        if blocked and record.get(PENDING_FIELD) != name:
            return self._log(name, args, {"status": "rejected", "error": "invalid_state",
                                          "message": f"not allowed while {blocked}"}, **where)
        table = self.state[ent.name]
        if partial:
            table[key] = {**record, PENDING_FIELD: name}  # half done: the marker is written, the effect is not
            return self._log(name, args, {"status": "partial_write", "message": faults.PARTIAL_WRITE_MESSAGE}, **where)
        if deleting:
            del table[key]
            self._deleted.add((ent.name, key))
            return self._log(name, args, {"status": "deleted", ent.name: self._visible(ent.name, key, record)},
                             applied=True, **where)
        computed = self._computed(compiled, args, record, ent)
        updated = {**record, **effect, **computed}
        updated.pop(PENDING_FIELD, None)
        updated[VERSION_FIELD] = int(record.get(VERSION_FIELD, 1)) + 1
        table[key] = updated
        return self._log(name, args, {"status": "updated", ent.name: self._visible(ent.name, key, updated),
                                      **({"computed": computed} if computed else {})}, applied=True, **where)

    def _create(self, compiled: CompiledTool, args: dict[str, Any], ent: Entity, *, given: Any = None) -> dict[str, Any]:
        name = compiled.tool.name
        table = self.state.setdefault(ent.name, {})
        made = given if given is not None else new_id(self.domain, ent.name, rng(self.seed, "create", name,
                                                                                   len(self.events)), self.options, table)
        if made is None:
            return self._log(name, args, {"status": "rejected", "error": "no_free_id",
                                          "message": f"no free {ent.id_argument} is left"}, entity=ent.name)
        orphan = self._missing_parent(ent, args)
        if orphan is not None:
            return self._log(name, args, {"status": "not_found", "message": orphan}, entity=ent.name)
        skip = {ent.id_argument, compiled.binding.id_argument}
        record = {ent.id_argument: made, **{k: v for k, v in args.items() if k not in skip}, VERSION_FIELD: 1}
        computed = self._computed(compiled, args, record, ent)
        record.update(computed)
        key = record_key(made)
        table[key] = record
        return self._log(name, args, {"status": "created", ent.name: dict(sorted(record.items())),
                                      **({"computed": computed} if computed else {})},
                         entity=ent.name, entity_id=key, applied=True)

    def _computed(self, compiled: CompiledTool, args: dict[str, Any], record: dict[str, Any],
                  ent: Entity) -> dict[str, Any]:
        """What the action declares the world works out (`computes:`), over the call, the record, the records it
        links to and every table; a value its data cannot give is left out."""
        out: dict[str, Any] = {}
        linked = {f: self.state.get(t, {}).get(record_key(record.get(f))) for f, t in ent.links().items()}
        roots = {"args": args, "record": record, "linked": {f: r for f, r in linked.items() if r is not None},
                 "records": self.state, "tables": self.domain.tables, "now": defaults.WORLD_NOW}
        for name, expression in sorted(compiled.action.computes.items()):
            try:
                value = expressions.evaluate(expression, roots)
            except expressions.FAILURES as exc:  # the pack's expression does not fit the data: said, never hidden
                self.compute_errors.append(f"{compiled.tool.name}: computes/{name} could not be worked out "
                                           f"({exc.__class__.__name__}: {str(exc)[:160]})")
                continue
            out[name] = round(value, 2) if isinstance(value, float) else value
        return out

    def _missing_parent(self, ent: Entity, args: dict[str, Any]) -> str | None:
        """Why a new record cannot be made: a link argument names a record that does not exist (None: all exist)."""
        for name, target in sorted(ent.links().items()):
            if name in args and target in self._entities:
                key = record_key(args[name])
                if self._lookup(self._entities[target], key, args[name]) is None:
                    return f"no {target} with id {key}"
        return None

    def _event(self, compiled: CompiledTool, args: dict[str, Any], ent: Entity | None) -> dict[str, Any]:
        """A write that names no record (send_message(to, body)): logged as a new record of its entity or tool."""
        tool = compiled.tool
        if ent is None:
            ent = self._entities.setdefault(tool.name, Entity(tool.name, f"{tool.name}_id", ()))
            self.state.setdefault(tool.name, {})
        if tool.kind == "create":
            return self._create(compiled, args, ent)
        keys = [k for k in tool.required if k in args] or sorted(args)
        if tool.kind == "destructive":
            for key, row in sorted(self.state[ent.name].items()):
                if keys and all(str(row.get(k)).lower() == str(args[k]).lower() for k in keys):
                    return self._log(tool.name, args, {"status": "already_done", "message": f"{tool.name} was already "
                                                       f"done for {ent.name} {key}"}, entity=ent.name, entity_id=key)
        return self._create(compiled, args, ent)

    # -- faults ---------------------------------------------------------------------------------------------------
    def _fault(self, compiled: CompiledTool, args: dict[str, Any], fault: Fault) -> dict[str, Any]:
        tool, ent = compiled.tool, compiled.binding.entity
        key = record = None
        if ent is not None and compiled.binding.id_argument in args:
            key = record_key(args[compiled.binding.id_argument])
            record = self._lookup(ent, key, args[compiled.binding.id_argument])
        where = {"entity": ent.name if ent else None, "entity_id": key}
        if fault.mode == "partial_write" and tool.writes and record is not None and ent is not None and key is not None:
            return self._write(compiled, args, ent, key, record, partial=True)
        if fault.mode == "malformed_result":
            self._answer(compiled, args)  # a write goes through as usual; only its reply is garbled
            done = self.events.pop()
            return self._log(tool.name, args, faults.garbled(done.result, write=tool.writes), entity=done.entity,
                             entity_id=done.entity_id, applied=done.applied)
        data = None
        if ent is not None and key is not None and not tool.writes:
            if fault.mode == "stale_result" and key in self._base.get(ent.name, {}):
                data = (ent.name, self._visible(ent.name, key, self._base[ent.name][key]))
            elif fault.mode == "partial_write" and record is not None:
                data = (ent.name, faults.partial_view(self._visible(ent.name, key, record)))
        return self._log(tool.name, args, faults.fault_result(fault.mode, self.options, data=data), **where)
