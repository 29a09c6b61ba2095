"""Drawing world values: entity fields from their specs, strings from regex patterns, anything from a JSON Schema.

Every draw takes an explicit numpy Generator, so the same seed always gives the same world.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import uuid
from typing import Any

import numpy as np

from sim_pipeline import defaults
from sim_pipeline.domain import FieldSpec, day_bound
from sim_pipeline.world.options import WorldOptions
from sim_pipeline.world.patterns import draw_pattern

_FORMAT_KINDS = {"email": "email", "idn-email": "email", "date": "date", "date-time": "datetime", "uuid": "uuid",
                 "ipv4": "ipv4"}  # string formats the world draws for real (others draw as text)


_FIRST_NAME = re.compile(r"(first|given|fore)_?name", re.IGNORECASE)
_LAST_NAME = re.compile(r"(last|family|sur)_?name", re.IGNORECASE)


def draw_person(gen: np.random.Generator, options: WorldOptions) -> tuple[str, str]:
    """A (full name, email) pair from the name pools."""
    first = options.first_names[gen.integers(len(options.first_names))]
    last = options.last_names[gen.integers(len(options.last_names))]
    domain = options.email_domains[gen.integers(len(options.email_domains))]
    return f"{first.title()} {last.title()}", f"{first}.{last}{gen.integers(10, 99)}@{domain}"


def _date(gen: np.random.Generator, options: WorldOptions, spec: FieldSpec | None = None) -> str:
    start, end = (dt.date.fromisoformat(d) for d in options.date_range)
    if spec is not None and (spec.earliest or spec.latest):  # the field's own bounds, relative to the world's clock
        span = dt.timedelta(days=defaults.WORLD_DATE_OPEN_SPAN_DAYS)
        low = dt.date.fromisoformat(day_bound(spec.earliest) or "") if spec.earliest else None
        high = dt.date.fromisoformat(day_bound(spec.latest) or "") if spec.latest else None
        start, end = low or (high - span), high or (low + span)  # type: ignore[operator]
    return (start + dt.timedelta(days=int(gen.integers((end - start).days + 1)))).isoformat()


def _sized(text: str, low: float | None, high: float | None) -> str:
    while low is not None and len(text) < low:
        text += " " + text.split()[-1]  # "note 12 12": longer, still not a placeholder
    return text[: int(high)] if high is not None else text


def draw_value(spec: FieldSpec, gen: np.random.Generator, options: WorldOptions) -> Any:
    """One value for a field of the given kind (domain-pack kinds plus the kinds schema inference adds)."""
    kind = spec.kind
    if kind == "enum":
        return spec.values[gen.integers(len(spec.values))]
    if kind == "money":
        low = 1.0 if spec.low is None else spec.low
        high = 1000.0 if spec.high is None else spec.high
        return round(float(gen.uniform(low, high)), 2)
    if kind == "integer":
        low = 0 if spec.low is None else int(spec.low)
        return int(gen.integers(low, max(low, 100 if spec.high is None else int(spec.high)) + 1))
    if kind == "date":
        return _date(gen, options, spec)
    if kind in ("email", "name"):
        name, email = draw_person(gen, options)
        # A first or a last name alone where the field asks for one part (a guest's first_name, a familyName).
        part = 0 if _FIRST_NAME.search(spec.name) else -1 if _LAST_NAME.search(spec.name) else None
        name = name if part is None else name.split()[part]
        return email if kind == "email" else _sized(name, spec.low, spec.high)
    if kind == "address":
        street = options.streets[gen.integers(len(options.streets))]
        return _sized(f"{gen.integers(1, 999)} {street}", spec.low, spec.high)
    if kind == "phone":
        area = options.phone_area_codes[gen.integers(len(options.phone_area_codes))]
        return _sized(f"+1{area}555{int(gen.integers(10_000)):04d}", spec.low, spec.high)
    if kind == "datetime":
        return f"{_date(gen, options)}T{int(gen.integers(8, 18)):02d}:{int(gen.integers(60)):02d}:00Z"
    if kind == "uuid":
        return str(uuid.UUID(bytes=gen.bytes(16), version=4))
    if kind == "ipv4":
        return "10." + ".".join(str(int(gen.integers(1, 255))) for _ in range(3))
    if kind == "pattern":
        drawn = draw_pattern(spec.values[0], gen)
        return drawn if drawn is not None else f"note {gen.integers(1000)}"
    if kind == "schema":
        return draw_from_schema(json.loads(spec.values[0]), gen, options, name=spec.name)
    if kind == "link":  # with no table to pick from (an open world's unseen record): an id in the default shape
        return str(int(gen.integers(*options.id_range)))
    text = spec.values[gen.integers(len(spec.values))] if spec.values else f"note {gen.integers(1000)}"
    return _sized(text, spec.low, spec.high) if kind == "text" else text


# -- JSON Schema ----------------------------------------------------------------------------------------------------
def _bounds(schema: dict[str, Any], typ: str | None) -> tuple[float | None, float | None]:
    """The (low, high) a drawn value must respect: numeric bounds, or string lengths."""
    if typ not in ("integer", "number"):
        return schema.get("minLength"), schema.get("maxLength")
    step = 1 if typ == "integer" else 0.01
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is None and isinstance(schema.get("exclusiveMinimum"), (int, float)):
        low = schema["exclusiveMinimum"] + step
    if high is None and isinstance(schema.get("exclusiveMaximum"), (int, float)):
        high = schema["exclusiveMaximum"] - step
    if typ == "integer":
        low, high = (None if low is None else math.ceil(low)), (None if high is None else math.floor(high))
    if low is not None and high is None:
        high = low + (100 if typ == "integer" else 1000)  # the pack defaults' spans: 0-100 and 1-1000
    if high is not None and low is None:
        low = min(0 if typ == "integer" else 1, high)
    if low is not None and high is not None and high < low:
        high = low
    return low, high


def field_spec(name: str, schema: dict[str, Any]) -> FieldSpec:
    """How the world draws a field whose tool argument has this schema."""
    typ = schema.get("type")
    typ = next((t for t in typ if t != "null"), None) if isinstance(typ, list) else typ
    low, high = _bounds(schema, typ)
    if "enum" in schema or "const" in schema:
        return FieldSpec(name, "enum", tuple(schema.get("enum", [schema.get("const")])))
    if typ == "boolean":
        return FieldSpec(name, "enum", (False, True))  # type: ignore[arg-type]
    if typ == "integer":
        return FieldSpec(name, "integer", low=low, high=high)
    if typ == "number":
        return FieldSpec(name, "money", low=low, high=high)
    if typ not in (None, "string"):
        return FieldSpec(name, "schema", (json.dumps(schema, sort_keys=True),))
    if schema.get("format") in _FORMAT_KINDS:
        return FieldSpec(name, _FORMAT_KINDS[schema["format"]])
    if "pattern" in schema:
        return FieldSpec(name, "pattern", (schema["pattern"],))
    lowered = name.lower()
    for word, kind in (("email", "email"), ("phone", "phone"), ("address", "address"), ("street", "address"),
                       ("name", "name"), ("date", "date")):
        if word in lowered:
            return FieldSpec(name, kind) if kind in ("email", "date") else FieldSpec(name, kind, low=low, high=high)
    return FieldSpec(name, "text", low=low, high=high)


def draw_from_schema(schema: Any, gen: np.random.Generator, options: WorldOptions, *, name: str = "value",
                     depth: int = 0) -> Any:
    """A value shaped by a JSON Schema (objects, arrays, enums, formats, patterns); best effort, never raises."""
    if not isinstance(schema, dict) or depth > defaults.WORLD_SCHEMA_MAX_DEPTH:
        return None
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return draw_from_schema(schema[key][0], gen, options, name=name, depth=depth + 1)
    if schema.get("allOf"):
        merged = {k: v for part in schema["allOf"] if isinstance(part, dict) for k, v in part.items()}
        return draw_from_schema({**merged, **{k: v for k, v in schema.items() if k != "allOf"}}, gen, options,
                                name=name, depth=depth + 1)
    typ = schema.get("type")
    typ = next((t for t in typ if t != "null"), "null") if isinstance(typ, list) else typ
    if typ == "object" or "properties" in schema:
        props = schema.get("properties", {})
        return {k: draw_from_schema(props.get(k, {}), gen, options, name=k, depth=depth + 1)
                for k in schema.get("required", []) if k in props}
    if typ == "array":
        cap = int(schema.get("maxItems", 10**6))
        low = min(max(int(schema.get("minItems", 1)), 1), cap)  # at least one item, unless the schema allows none
        high = max(low, min(cap, low + defaults.WORLD_ARRAY_EXTRA_ITEMS))
        count = int(gen.integers(low, high + 1))
        return [draw_from_schema(schema.get("items", {}), gen, options, name=name, depth=depth + 1)
                for _ in range(count)]
    if typ == "null":
        return None
    return draw_value(field_spec(name, schema), gen, options)


def draw_entity_id(schema: dict[str, Any] | None, gen: np.random.Generator, options: WorldOptions,
                   taken: set[str] | dict[str, Any]) -> str | int | None:
    """A fresh id shaped by the id argument's schema (digits in the id range when it says nothing); None if exhausted."""
    for _ in range(defaults.WORLD_ID_DRAW_TRIES):
        if not schema or set(schema) <= {"type", "description", "title", "minLength", "maxLength", "examples"}:
            typ = (schema or {}).get("type")
            low, high = options.id_range
            value: Any = int(gen.integers(low, high))
            value = value if typ in ("integer", "number") else str(value)
        elif schema.get("type") in ("integer", "number") and "enum" not in schema:
            low = int(schema.get("minimum", options.id_range[0]))
            high = max(low + 1, int(schema.get("maximum", options.id_range[1] - 1)) + 1)
            value = int(gen.integers(low, high))
        else:
            value = draw_from_schema(schema, gen, options, name="id")
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value) not in taken:
            return value
    return None
