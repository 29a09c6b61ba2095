"""Checking a call's arguments: missing required, invalid against the schema, or echoing the schema.

Each domain's tools are compiled once (a jsonschema validator, the entity binding and the write action per tool)
and reused by every sandbox of that domain: building a validator costs far more than running it.
"""

from __future__ import annotations

import json
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema.exceptions import ValidationError, best_match

from sim_pipeline import json_schema
from sim_pipeline.domain import Action, Domain, Reference, Tool
from sim_pipeline.world.infer import Binding, bind, default_action, makes_record
from sim_pipeline.world.placeholder import HINT, placeholder_arguments

REJECTIONS = ("missing_required", "invalid_argument", "placeholder_argument")  # argument problems, checked in order


@dataclass(frozen=True)
class CompiledTool:
    """One tool ready to answer calls: schema validator, what it acts on and what a write sets."""

    tool: Tool
    validator: Any  # a jsonschema validator for the tool's parameters, with format checking
    binding: Binding
    action: Action
    properties: dict[str, Any]
    makes_record: bool  # a write that logs a new record instead of changing one it names
    references: tuple[Reference, ...] = ()  # the domain's references that bind its arguments (world/references.py)


def validator_for(parameters: dict[str, Any]) -> Any:
    """A draft 2020-12 validator with format checking (so `"format": "email"` is enforced) whose patterns run on
    RE2: an argument is model output, and a backtracking match of it could take any time (json_schema.py)."""
    return json_schema.validator(parameters)


def compile_tool(domain: Domain, tool: Tool) -> CompiledTool:
    """Compile one tool of a domain."""
    binding = bind(domain, tool)
    action = domain.actions.get(tool.name) or default_action(tool, binding.id_argument)
    owner = binding.entity.name if binding.entity is not None else None
    bound = tuple(r for r in domain.references if r.owner in ("*", tool.name, owner))
    return CompiledTool(tool, validator_for(tool.parameters), binding, action,
                        dict(tool.parameters.get("properties", {})), makes_record(tool, binding), bound)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def as_object(arguments: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """The call's arguments as a fresh JSON object (so events never alias the caller's dict)."""
    if arguments is None or arguments == "":
        return {}
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, allow_nan=False)
    value = json.loads(text, parse_constant=_reject_constant)
    if not isinstance(value, dict):
        raise TypeError(f"arguments must be a JSON object, not {type(value).__name__}")
    return value


_BOOKS: dict[int, tuple[weakref.ref[Domain], dict[str, CompiledTool]]] = {}


def compiled_tools(domain: Domain) -> dict[str, CompiledTool]:
    """The domain's tools compiled once per Domain object (cached by identity while the domain lives)."""
    key = id(domain)
    hit = _BOOKS.get(key)
    if hit is not None and hit[0]() is domain:
        return hit[1]
    book = {t.name: compile_tool(domain, t) for t in domain.tools}
    _BOOKS[key] = (weakref.ref(domain, lambda _ref, k=key: _BOOKS.pop(k, None)), book)
    return book


def _field(error: ValidationError) -> str:
    """The argument an error is about, as a path: `order_id`, `items/0/sku`; the unexpected or missing name."""
    path = [str(p) for p in error.absolute_path]
    instance, schema = error.instance, error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "required" and isinstance(instance, dict):
        path += [str(r) for r in error.validator_value if r not in instance][:1]
    elif error.validator == "additionalProperties" and isinstance(instance, dict):
        patterns = list(schema.get("patternProperties", {}))
        path += [k for k in instance if k not in schema.get("properties", {})
                 and not any(json_schema.search(p, k) for p in patterns)][:1]
    return "/".join(path) or "arguments"


def rejection(compiled: CompiledTool, args: dict[str, Any]) -> dict[str, Any] | None:
    """The `rejected` result for bad arguments, or None when they are fine."""
    tool = compiled.tool
    missing = [r for r in tool.required if r not in args or args[r] is None or args[r] == ""]
    if missing:
        return {"status": "rejected", "error": "missing_required", "fields": missing,
                "message": f"missing required argument(s): {', '.join(missing)}"}
    errors = list(compiled.validator.iter_errors(args))
    if errors:
        error = best_match(errors)
        where = _field(error)
        return {"status": "rejected", "error": "invalid_argument", "field": where, "fields": [where.split("/")[0]],
                "message": f"{where}: {error.message}"}
    echoed = placeholder_arguments(args, compiled.properties)
    if echoed:
        return {"status": "rejected", "error": "placeholder_argument", "fields": echoed,
                "message": f"{', '.join(echoed)} looks like a placeholder", "hint": HINT}
    return None
