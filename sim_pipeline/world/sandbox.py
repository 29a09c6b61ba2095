"""The sandbox world: tools answer from schema-shaped state, deterministically, with scheduled faults."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

import jsonschema

from sim_pipeline.domain import Action, Domain, Tool
from sim_pipeline.world.options import WorldOptions
from sim_pipeline.world.placeholder import HINT, placeholder_arguments
from sim_pipeline.world.state import State, build_state, draw_id
from sim_pipeline.seeding import rng

STATUSES = (
    "ok", "created", "updated", "deleted", "not_found", "rejected", "already_done",
    "timeout", "malformed", "stale", "permission_denied", "rate_limited", "partial_write",
)
FAULT_STATUS = {
    "timeout": "timeout", "malformed_result": "malformed", "stale_result": "stale",
    "permission_denied": "permission_denied", "rate_limited": "rate_limited", "partial_write": "partial_write",
}
UNKNOWN_VALUE = "unknown"  # what a masked field reads as when the world cannot tell
PENDING_FIELD = "pending_action"  # marks a write that was half done


@dataclass(frozen=True)
class Fault:
    """A fault scheduled on one tool: the mode and how many calls it hits (None: every call)."""

    tool: str
    mode: str
    hits: int | None = None


@dataclass(frozen=True)
class WorldSetup:
    """What a situation changes in the seeded world before the conversation starts."""

    upserts: tuple[tuple[str, dict[str, Any]], ...] = ()
    deletes: tuple[tuple[str, str], ...] = ()
    masked: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    fault: Fault | None = None


@dataclass
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


def default_action(tool: Tool) -> Action:
    """The effect of a writing tool with no declared action: destructive verbs set status to their past tense."""
    verb = tool.name.split("_")[0]
    if tool.kind == "destructive":
        past = verb + ("d" if verb.endswith("e") else "ed")
        return Action(tool.name, {"status": past}, {})
    return Action(tool.name, {}, {})


class Sandbox:
    """A stateful world for one conversation: `call` never raises, every result has a `status`."""

    def __init__(self, domain: Domain, *, seed: int, options: WorldOptions | None = None,
                 setup: WorldSetup | None = None, state: State | None = None) -> None:
        self.domain = domain
        self.seed = seed
        self.options = options or WorldOptions()
        self.state: State = copy.deepcopy(state) if state is not None else build_state(domain, seed, self.options)
        self.setup = setup or WorldSetup()
        for entity, record in self.setup.upserts:
            ent = next(e for e in domain.entities if e.name == entity)
            self.state.setdefault(entity, {})[str(record[ent.id_argument])] = dict(record)
        for entity, record_id in self.setup.deletes:
            self.state.get(entity, {}).pop(record_id, None)
        self._masked = {(e, i): set(f) for e, i, f in self.setup.masked}
        self._fault_calls = 0
        self.events: list[Event] = []

    # -- public ---------------------------------------------------------------------------------
    def call(self, name: str, arguments: dict[str, Any] | str | None) -> dict[str, Any]:
        """Run one tool call against the world and return its result."""
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments or {})
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except (ValueError, TypeError) as exc:
            return self._log(name, {}, {"status": "rejected", "error": "invalid_argument",
                                        "message": f"arguments are not a JSON object: {exc}"})
        try:
            return self._call(name, args)
        except Exception as exc:  # a bug in the world must not end the rollout: it becomes a result
            return self._log(name, args, {"status": "rejected", "error": "world_error", "message": repr(exc)})

    def snapshot(self) -> State:
        """A copy of the current state tables."""
        return copy.deepcopy(self.state)

    # -- internals ------------------------------------------------------------------------------
    def _log(self, name: str, args: dict[str, Any], result: dict[str, Any], *, entity: str | None = None,
             entity_id: str | None = None, applied: bool = False) -> dict[str, Any]:
        self.events.append(Event(len(self.events), name, args, result["status"], entity, entity_id, applied, result))
        return result

    def _call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        tool = self.domain.tool(name)
        if tool is None:
            return self._log(name, args, {"status": "rejected", "error": "unknown_tool",
                                          "message": f"no tool named '{name}'"})
        props = tool.parameters.get("properties", {})
        missing = [r for r in tool.required if r not in args or args[r] in (None, "")]
        if missing:
            return self._log(name, args, {"status": "rejected", "error": "missing_required", "fields": missing,
                                          "message": f"missing required argument(s): {', '.join(missing)}"})
        error = next(iter(jsonschema.Draft202012Validator(
            tool.parameters, format_checker=jsonschema.FormatChecker()).iter_errors(args)), None)
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "arguments"
            return self._log(name, args, {"status": "rejected", "error": "invalid_argument", "field": where,
                                          "message": f"{where}: {error.message}"})
        echoed = placeholder_arguments(args, props)
        if echoed:
            return self._log(name, args, {"status": "rejected", "error": "placeholder_argument", "fields": echoed,
                                          "message": f"{', '.join(echoed)} looks like a placeholder", "hint": HINT})
        fault = self.setup.fault
        if fault is not None and fault.tool == name and (fault.hits is None or self._fault_calls < fault.hits):
            self._fault_calls += 1
            return self._fault(tool, args, fault)
        return self._answer(tool, args)

    def _record(self, tool: Tool, args: dict[str, Any]) -> tuple[str | None, str | None, dict[str, Any] | None]:
        entity = self.domain.entity_for(tool)
        if entity is None or entity.id_argument not in args:
            return (entity.name if entity else None), None, None
        record_id = str(args[entity.id_argument])
        return entity.name, record_id, self.state.get(entity.name, {}).get(record_id)

    def _visible(self, entity: str, record: dict[str, Any], record_id: str) -> dict[str, Any]:
        masked = self._masked.get((entity, record_id), set())
        return {k: (UNKNOWN_VALUE if k in masked else v) for k, v in sorted(record.items())}

    def _answer(self, tool: Tool, args: dict[str, Any]) -> dict[str, Any]:
        entity, record_id, record = self._record(tool, args)
        if record_id is not None and record is None:
            return self._log(tool.name, args, {"status": "not_found", "message": f"no {entity} with id {record_id}"},
                             entity=entity, entity_id=record_id)
        if tool.kind == "read" or not tool.writes:
            return self._read(tool, args, entity, record_id, record)
        if tool.kind == "create":
            return self._create(tool, args, entity)
        return self._write(tool, args, entity, record_id, record)

    def _read(self, tool: Tool, args: dict[str, Any], entity: str | None, record_id: str | None,
              record: dict[str, Any] | None) -> dict[str, Any]:
        if record is not None and entity is not None and record_id is not None:
            visible = self._visible(entity, record, record_id)
            if tool.name.startswith("verify"):
                verified = all(str(record.get(k, "")).lower() == str(v).lower() for k, v in args.items())
                result = {"status": "ok", "verified": verified}
            else:
                result = {"status": "ok", entity: visible}
            return self._log(tool.name, args, result, entity=entity, entity_id=record_id)
        ent = next((e for e in self.domain.entities if e.name == entity), None)
        filters = {k: v for k, v in args.items() if ent and k in {f.name for f in ent.fields}}
        rows = [self._visible(entity, r, rid) for rid, r in sorted(self.state.get(entity or "", {}).items())
                if filters and all(str(r.get(k, "")).lower() == str(v).lower() for k, v in filters.items())]
        return self._log(tool.name, args, {"status": "ok", f"{entity}s": rows, "count": len(rows)}, entity=entity)

    def _action(self, tool: Tool) -> Action:
        return self.domain.actions.get(tool.name) or default_action(tool)

    def _effect(self, action: Action, args: dict[str, Any]) -> dict[str, Any]:
        return {k: (args.get(v[1:]) if v.startswith("$") else v) for k, v in action.sets.items()}

    def _write(self, tool: Tool, args: dict[str, Any], entity: str | None, record_id: str | None,
               record: dict[str, Any] | None, *, partial: bool = False) -> dict[str, Any]:
        if record is None or entity is None or record_id is None:
            return self._log(tool.name, args, {"status": "ok", "message": "done"}, entity=entity)
        action = self._action(tool)
        effect = self._effect(action, args)
        if self._masked.get((entity, record_id), set()) & (set(action.requires) | set(effect)):
            return self._log(tool.name, args, {"status": "rejected", "error": "state_unknown",
                                               "message": f"the state of {entity} {record_id} cannot be determined"},
                             entity=entity, entity_id=record_id)
        if effect and all(record.get(k) == v for k, v in effect.items()):
            return self._log(tool.name, args, {"status": "already_done", "message": f"{entity} {record_id} already "
                                               + ", ".join(f"{k}={v}" for k, v in effect.items())},
                             entity=entity, entity_id=record_id)
        blocked = {k: record.get(k) for k, allowed in action.requires.items() if record.get(k) not in allowed}
        if blocked and record.get(PENDING_FIELD) != tool.name:
            return self._log(tool.name, args, {"status": "rejected", "error": "invalid_state",
                                               "message": f"not allowed while {blocked}"},
                             entity=entity, entity_id=record_id)
        if partial:
            record[PENDING_FIELD] = tool.name  # half done: the marker is written, the effect is not
            return self._log(tool.name, args, {"status": "partial_write", "message": "the write did not complete; "
                                               "retry to finish it"}, entity=entity, entity_id=record_id)
        record.update(effect)
        record.pop(PENDING_FIELD, None)
        record["version"] = int(record.get("version", 1)) + 1
        status = "deleted" if tool.name.split("_")[0] in ("delete", "remove") else "updated"
        return self._log(tool.name, args, {"status": status, entity: self._visible(entity, record, record_id)},
                         entity=entity, entity_id=record_id, applied=True)

    def _create(self, tool: Tool, args: dict[str, Any], entity: str | None) -> dict[str, Any]:
        ent = next((e for e in self.domain.entities if e.name == entity), None) or (
            self.domain.entities[0] if self.domain.entities else None)
        if ent is None:
            return self._log(tool.name, args, {"status": "created", "id": "1"}, applied=True)
        table = self.state.setdefault(ent.name, {})
        new_id = draw_id(rng(self.seed, "create", tool.name, len(self.events)), self.options, table)
        record = {ent.id_argument: new_id, **{k: v for k, v in args.items() if k != ent.id_argument}, "version": 1}
        table[new_id] = record
        return self._log(tool.name, args, {"status": "created", ent.name: dict(sorted(record.items()))},
                         entity=ent.name, entity_id=new_id, applied=True)

    def _fault(self, tool: Tool, args: dict[str, Any], fault: Fault) -> dict[str, Any]:
        status = FAULT_STATUS[fault.mode]
        entity, record_id, record = self._record(tool, args)
        if fault.mode == "partial_write" and tool.writes and record is not None:
            return self._write(tool, args, entity, record_id, record, partial=True)
        if fault.mode == "malformed_result":
            if tool.writes:
                self._answer(tool, args)  # the write goes through as usual; only its reply is garbled
                done = self.events.pop()
                return self._log(tool.name, args, {"status": status, "raw": "<html>502 Bad Gateway</html>"},
                                 entity=done.entity, entity_id=done.entity_id, applied=done.applied)
            return self._log(tool.name, args, {"status": status, "raw": "{\"ord"}, entity=entity, entity_id=record_id)
        result: dict[str, Any] = {"status": status, "message": {
            "timeout": "the service did not answer in time",
            "stale": "the record changed since it was cached; read it again",
            "permission_denied": "this account may not perform this operation",
            "rate_limited": "too many requests",
            "partial_write": "the service returned part of the data",
        }[status]}
        if status == "rate_limited":
            result["retry_after_seconds"] = self.options.retry_after_seconds
        return self._log(tool.name, args, result, entity=entity, entity_id=record_id)
