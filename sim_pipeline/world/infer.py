"""A world from bare tool schemas: entities, id arguments and lookup fields inferred when no domain pack exists.

Rules (tools are read in name order, so the result does not depend on list order):
1. An argument named `<x>_id` / `<x>Id` (a string or number) is the id of entity `x`.
2. A tool acts on the entity whose id it takes, preferring the one its name mentions (`cancel_order(order_id,
   user_id)` acts on order); a create tool acts on the noun of its name (`add_note(ticket_id, text)` adds a note).
3. A bare `id` argument is the id of the tool name's noun (`get_order(id)` -> order, `list_users` -> user).
4. A tool without an id acts on the entity its name's noun matches; if none matches, that noun becomes a new entity
   whose id the world makes up (`<noun>_id`, "synthetic"): writes on it are events, each a new record.
5. An entity's fields are the other arguments of its read, create and update tools (a destructive tool's extra
   arguments, like a reason, describe the call, not the record); kinds come from type, enum, format and pattern.
6. It is found by the first field named in `defaults.WORLD_LOOKUP_ARGUMENTS` or formatted as an email; an entity
   with a synthetic id is found by the first required string argument of its read tools (`get_weather(city)`).
7. A field named `<x>_id` where `x` is another entity links to that entity's records (`reservation.user_id -> user`):
   the world draws it from existing users, and a create naming a user that does not exist answers not_found.
A tool whose name has no noun and that takes no id (e.g. `search(query)`) is bound to no entity.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from sim_pipeline import defaults, json_schema
from sim_pipeline.domain import Action, Domain, Entity, FieldSpec, Tool
from sim_pipeline.errors import WorldError
from sim_pipeline.protocol.tool_kinds import first_verb, guess_kind, reads
from sim_pipeline.world.values import field_spec

_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_ID = re.compile(r"^(?P<noun>[a-z][a-z0-9_]*?)_id$")
_CUT = {"by", "for", "from", "with", "of", "to", "in", "on", "at", "as"}  # words after which a name stops naming the noun
_PAST = {"reset": "reset", "send": "sent", "pay": "paid", "set": "set", "cancel": "cancelled", "shut": "shut",
         "put": "put", "run": "ran", "undo": "undone", "stop": "stopped", "ship": "shipped", "drop": "dropped"}


@dataclass(frozen=True, eq=False)
class InferredDomain(Domain):
    """A Domain built from tool schemas alone: tools bound to entities by name rather than by first match."""

    bindings: dict[str, tuple[str | None, str | None]] = field(default_factory=dict)  # tool -> (entity, id arg)
    id_schemas: dict[str, dict[str, Any]] = field(default_factory=dict)  # entity -> schema of its id argument
    synthetic: tuple[str, ...] = ()  # entities no tool names by id: the world makes their ids up

    def entity_for(self, tool: Tool) -> Entity | None:
        """The entity a tool is bound to, or None."""
        name = self.bindings.get(tool.name, (None, None))[0]
        return next((e for e in self.entities if e.name == name), None)


@dataclass(frozen=True)
class Binding:
    """What a tool acts on: its entity, the argument carrying the entity's id (None: it takes none), and whether
    the entity's ids are made up by the world (writes without an id then log a new event record)."""

    entity: Entity | None
    id_argument: str | None
    synthetic: bool = False


def snake(name: str) -> str:
    """camelCase or kebab-case as snake_case."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).replace("-", "_").lower()


def singular(word: str) -> str:
    """A plural noun's singular form (orders -> order, entries -> entry, addresses -> address)."""
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("sses", "xes", "ches", "shes")):
        return word[:-2]
    return word[:-1] if word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 3 else word


def plural(noun: str) -> str:
    """The key a list of records comes back under (order -> orders, entry -> entries)."""
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")


def past_tense(verb: str) -> str:
    """The status a destructive verb leaves (cancel -> cancelled, close -> closed, reset -> reset)."""
    if verb in _PAST:
        return _PAST[verb]
    if verb.endswith("e"):
        return verb + "d"
    return verb[:-1] + "ied" if verb.endswith("y") and verb[-2:-1] not in "aeiou" else verb + "ed"


def is_id_argument(name: str) -> bool:
    """Whether an argument name carries an id (`id`, `order_id`, `orderId`)."""
    return snake(name) == "id" or bool(_ID.match(snake(name)))


def default_action(tool: Tool, id_argument: str | None = None) -> Action:
    """The effect of a writing tool with no declared action.

    A destructive (or delete) tool sets `status` to its verb's past tense (cancel -> cancelled); an update tool sets
    each required non-id argument to the call's value (`$argument`), or `status` like a destructive one when it has
    none.
    """
    verb = first_verb(tool.name)
    if tool.kind == "update":
        sets = {p: f"${p}" for p in tool.required if p != id_argument and not is_id_argument(p)}
        return Action(tool.name, sets or {"status": past_tense(verb)}, {})
    if tool.kind in ("destructive", "delete"):
        return Action(tool.name, {"status": past_tense(verb)}, {})
    return Action(tool.name, {}, {})


def bind(domain: Domain, tool: Tool) -> Binding:
    """What a tool acts on, for a domain pack (first match, as `Domain.entity_for`) or an inferred domain."""
    props = tool.parameters.get("properties", {})
    if isinstance(domain, InferredDomain):
        name, id_argument = domain.bindings.get(tool.name, (None, None))
        entity = next((e for e in domain.entities if e.name == name), None)
        return Binding(entity, id_argument, name in domain.synthetic)
    entity = domain.entity_for(tool)
    return Binding(entity, entity.id_argument if entity and entity.id_argument in props else None)


def id_schema(domain: Domain, entity: str) -> dict[str, Any] | None:
    """The schema an entity's ids must satisfy: inferred from the id argument, or a pack entity's `id_pattern`
    (None: ids are digits in the id range)."""
    if isinstance(domain, InferredDomain):
        return domain.id_schemas.get(entity)
    pattern = next((e.id_pattern for e in domain.entities if e.name == entity), None)
    return {"type": "string", "pattern": pattern} if pattern else None


def parse_tools(tools: Sequence[Mapping[str, Any]], kinds: Mapping[str, str] | None = None) -> tuple[Tool, ...]:
    """OpenAI function schemas (`{"type": "function", "function": {...}}` or the bare function) as Tools, of the kind
    `kinds` declares, else the one their name suggests."""
    parsed: dict[str, Tool] = {}
    for i, raw in enumerate(tools):
        fn = raw.get("function", raw) if isinstance(raw, Mapping) else None
        name = fn.get("name") if isinstance(fn, Mapping) else None
        if not isinstance(name, str) or not _NAME.match(name):
            raise WorldError(f"tools[{i}]: name {name!r} is not a function name. Fix: give each tool a name "
                             "matching ^[a-zA-Z0-9_-]{1,64}$ under 'function'")
        if name in parsed:
            raise WorldError(f"tools[{i}]: a second tool named '{name}'. Fix: give every tool its own name")
        params = dict(fn.get("parameters") or {"type": "object", "properties": {}})
        try:
            jsonschema.Draft202012Validator.check_schema(params)
        except jsonschema.SchemaError as exc:
            raise WorldError(f"tool '{name}': parameters are not a valid JSON Schema ({exc.message}). "
                             "Fix: write parameters as a JSON Schema object") from None
        problem = json_schema.pattern_problem(params)  # arguments are matched with RE2, never by backtracking
        if problem is not None:
            raise WorldError(f"tool '{name}': field 'parameters/{problem.path}': {problem.problem}. "
                             f"Fix: {problem.fix}")
        if params.get("type", "object") != "object" or not isinstance(params.get("properties", {}), dict):
            raise WorldError(f"tool '{name}': parameters must be an object schema with properties. "
                             "Fix: use {\"type\": \"object\", \"properties\": {...}}")
        description = str(fn.get("description", ""))
        schema = {"type": "function", "function": {"name": name, "description": description, "parameters": params}}
        parsed[name] = Tool(name, description, params, schema, (kinds or {}).get(name) or guess_kind(name))
    return tuple(parsed[n] for n in sorted(parsed))


def _nouns(tool: Tool) -> list[str]:
    words = snake(tool.name).split("_")[1:]
    cut = next((i for i, w in enumerate(words) if w in _CUT), len(words))
    return [singular(w) for w in words[:cut] if w]


def _noun(tool: Tool, known: Mapping[str, Any]) -> str | None:
    """The entity a tool's name refers to: the last known noun it mentions, else its words as a new noun."""
    words = _nouns(tool)
    return next((w for w in reversed(words) if w in known), "_".join(words) or None)


def infer_domain(tools: Sequence[Mapping[str, Any]], *, name: str = "tools",
                 kinds: Mapping[str, str] | None = None) -> InferredDomain:
    """A Domain inferred from OpenAI tool schemas alone (see the module docstring for the rules); `kinds`: the kinds a
    pack declares (`tools:`), which bind as the name's guess would (a create acts on its name's noun).

    The same schemas give the same Domain object (cached), so sandboxes built from one tool list share compiled
    validators.
    """
    try:
        text = json.dumps([list(tools), dict(kinds or {})], sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise WorldError(f"tools are not JSON ({exc}). Fix: pass OpenAI function schemas as plain JSON data") from None
    return _infer_cached(text, name)


@lru_cache(maxsize=64)
def _infer_cached(text: str, name: str) -> InferredDomain:
    return _infer(json.loads(text), name)


def _infer(given: list[Any], name: str) -> InferredDomain:
    tools, kinds = given
    parsed = parse_tools(tools, kinds)
    ids: dict[str, tuple[str, dict[str, Any]]] = {}  # noun -> (id argument, its schema), first seen wins
    for tool in parsed:
        for arg, spec in tool.parameters.get("properties", {}).items():
            match = _ID.match(snake(arg))
            if match and isinstance(spec, dict) and spec.get("type", "string") in ("string", "integer", "number"):
                ids.setdefault(match["noun"], (arg, spec))
    for tool in parsed:  # a bare `id` names the noun of its tool: known after every `<x>_id` is
        spec = tool.parameters.get("properties", {}).get("id")
        noun = _noun(tool, ids)
        if isinstance(spec, dict) and noun is not None and spec.get("type", "string") in ("string", "integer", "number"):
            ids.setdefault(noun, ("id", spec))
    bindings: dict[str, tuple[str | None, str | None]] = {}
    synthetic: dict[str, None] = {}
    for tool in parsed:
        props = tool.parameters.get("properties", {})
        mine = [a for a in props if snake(a) in {snake(ids[n][0]) for n in ids} or snake(a) == "id"]
        noun = _noun(tool, ids)
        by_name = next((a for a in mine if snake(a) == "id" or (noun and _ID.match(snake(a))
                                                                  and _ID.match(snake(a))["noun"] == noun)), None)
        if tool.kind != "create" and by_name is None and mine:
            by_name = next((a for a in mine if a in tool.required), mine[0])
        if by_name is not None:
            target = noun if snake(by_name) == "id" else _ID.match(snake(by_name))["noun"]  # type: ignore[index]
            if target in ids:
                bindings[tool.name] = (target, by_name)
                continue
        if noun is not None and (noun in ids or noun in synthetic or tool.kind == "create" or props):
            if noun not in ids:
                synthetic[noun] = None
            bindings[tool.name] = (noun, None)
        else:
            bindings[tool.name] = (None, None)
    entities = tuple(_entity(noun, parsed, bindings, ids, noun in synthetic)
                     for noun in sorted({n for n, _ in bindings.values() if n is not None}))
    return InferredDomain(
        name=name, title=name, agent_role="", path=Path("."), tools=parsed, rules=(), entities=entities,
        actions={}, facts={}, constraints=(), stances=defaults.STANCES, policy_text="", bindings=bindings,
        id_schemas={n: dict(ids[n][1]) for n in ids}, synthetic=tuple(sorted(synthetic)),
    )


def _entity(noun: str, tools: tuple[Tool, ...], bindings: Mapping[str, tuple[str | None, str | None]],
            ids: Mapping[str, tuple[str, dict[str, Any]]], synthetic: bool) -> Entity:
    id_argument = ids[noun][0] if noun in ids else f"{noun}_id"
    fields: dict[str, FieldSpec] = {}
    keys: list[str] = []
    for tool in tools:
        if bindings[tool.name][0] != noun or tool.kind in ("destructive", "delete"):
            continue
        props = tool.parameters.get("properties", {})
        for arg, spec in props.items():
            if arg == bindings[tool.name][1] or arg == id_argument or snake(arg) in defaults.WORLD_QUERY_ARGUMENTS:
                continue
            if not isinstance(spec, dict):
                continue
            linked = _ID.match(snake(arg))
            if linked and linked["noun"] in ids and linked["noun"] != noun:
                # `user_id` on a reservation names a user record (rule 7): drawn from the users, checked on create.
                fields.setdefault(arg, FieldSpec(arg, "link", (linked["noun"],)))
                continue
            fields.setdefault(arg, field_spec(arg, spec))
            if reads(tool.kind) and arg in tool.required and fields[arg].kind not in ("enum", "integer", "money"):
                keys.append(arg)
    lookup = next((n for w in defaults.WORLD_LOOKUP_ARGUMENTS for n in fields if snake(n) == w), None)
    lookup = lookup or next((n for n, f in fields.items() if f.kind == "email"), None)
    if lookup is None and synthetic and keys:
        lookup = keys[0]
    return Entity(noun, id_argument, tuple(fields.values()), lookup)


def is_synthetic(domain: Domain, entity: str) -> bool:
    """Whether the world makes an entity's ids up (no tool takes them): writes without an id log new records."""
    return isinstance(domain, InferredDomain) and entity in domain.synthetic


def makes_record(tool: Tool, binding: Binding) -> bool:
    """Whether a write makes a new record (a create, a sent message) rather than changing one it names.

    A write names its record by id, or by the entity's lookup field; on an entity whose ids the world makes up, a
    destructive verb other than delete (send, pay, transfer) logs a new record even when given the lookup field.
    """
    if not tool.writes:
        return False
    if tool.kind == "create" or binding.entity is None:
        return True
    if binding.id_argument is not None:
        return False
    if binding.entity.lookup_by not in tool.parameters.get("properties", {}):
        return True
    return binding.synthetic and tool.kind == "destructive"
