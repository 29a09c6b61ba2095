"""Schema-echo detection: an argument that repeats the schema instead of what the customer said."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

# Values an agent writes when it fills a slot from the schema rather than from the conversation.
_GENERIC = {
    "string", "str", "number", "integer", "int", "value", "id", "none", "null", "n/a", "na", "unknown", "tbd",
    "todo", "test", "sample", "example", "placeholder", "xxx", "xxxx",
}
_BRACKETED = re.compile(r"^\s*[<\[{(].*[>\]})]\s*$")
_REPEATED = re.compile(r"^([^0-9]|0)\1{2,}$")  # xxx, ***, 000; never 1111, which can be a real id
# "your email", "the customer's name": a slot described, not filled (short, so "user's guide is lost" is not one)
_YOUR = re.compile(r"^(your|(the\s+)?(customer|user|caller|client)'?s)(\s+[\w-]+){1,2}$", re.IGNORECASE)
_EXAMPLE_EMAIL = re.compile(r"@example\.(com|org|net)$|^(user|test|john\.?doe|jane\.?doe)@", re.IGNORECASE)
HINT = "ask the customer for the actual value"


def _norm(text: str) -> str:
    return re.sub(r"[\s_\-]+", " ", text.strip().lower())


@lru_cache(maxsize=4096)
def _echoes(name: str, description: str) -> frozenset[str]:
    """The normalized texts that echo a slot: its name, its name without `id`, and a long enough description."""
    norm_name = _norm(name)
    norm_description = _norm(description)
    return frozenset({norm_name, norm_name.removesuffix(" id"), *([norm_description] if len(norm_description) > 8
                                                                  else [])})


def is_placeholder(value: Any, name: str, schema: dict[str, Any]) -> bool:
    """Whether a string argument echoes the schema (its name, description, type or a template) instead of data."""
    if not isinstance(value, str) or "enum" in schema or "const" in schema:
        return False  # enums are validated by the schema itself; numbers cannot echo text
    text = value.strip()
    norm = _norm(text)
    if not norm:
        return False
    return bool(
        norm in _GENERIC
        or norm in _echoes(name, str(schema.get("description", "")))
        or _BRACKETED.match(text)
        or _REPEATED.match(norm.replace(" ", ""))
        or _YOUR.match(text)
        or _EXAMPLE_EMAIL.search(text)
    )


def _walk(value: Any, name: str, schema: Any, path: str, out: list[str]) -> None:
    schema = schema if isinstance(schema, dict) else {}
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key, item in value.items():
            if isinstance(props, dict) and key in props:
                _walk(item, key, props[key], f"{path}/{key}", out)
    elif isinstance(value, list):
        items = schema.get("items", {})
        for i, item in enumerate(value):
            _walk(item, name, items, f"{path}/{i}", out)
    elif is_placeholder(value, name, schema):
        out.append(path)


def placeholder_arguments(arguments: dict[str, Any], properties: dict[str, Any]) -> list[str]:
    """Paths (`reason`, `items/0/sku`) of the declared arguments, at any depth, whose values are placeholders."""
    out: list[str] = []
    for key, value in arguments.items():
        if key in properties:
            _walk(value, key, properties[key], key, out)
    return out
