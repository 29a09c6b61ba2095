"""Schema-echo detection: an argument that repeats the schema instead of what the customer said."""

from __future__ import annotations

import re
from typing import Any

# Values an agent writes when it fills a slot from the schema rather than from the conversation.
_GENERIC = {
    "string", "str", "number", "integer", "int", "value", "id", "none", "null", "n/a", "na", "unknown", "tbd",
    "todo", "test", "sample", "example", "placeholder", "xxx", "xxxx",
}
_BRACKETED = re.compile(r"^\s*[<\[{(].*[>\]})]\s*$")
_REPEATED = re.compile(r"^(.)\1{2,}$")  # xxx, 000, ...
_YOUR = re.compile(r"^(your|the customer'?s?|customer|user'?s?)\s+\w+", re.IGNORECASE)
_EXAMPLE_EMAIL = re.compile(r"@example\.(com|org|net)$|^(user|test|john\.?doe|jane\.?doe)@", re.IGNORECASE)
HINT = "ask the customer for the actual value"


def _norm(text: str) -> str:
    return re.sub(r"[\s_\-]+", " ", text.strip().lower())


def is_placeholder(value: Any, name: str, schema: dict[str, Any]) -> bool:
    """Whether a string argument echoes the schema (its name, description, type or a template) instead of data."""
    if not isinstance(value, str) or "enum" in schema:
        return False  # enums are validated by the schema itself; numbers cannot echo text
    text = value.strip()
    norm = _norm(text)
    if not norm:
        return False
    description = _norm(schema.get("description", ""))
    return bool(
        norm in _GENERIC
        or _BRACKETED.match(text)
        or _REPEATED.match(norm.replace(" ", ""))
        or _YOUR.match(text)
        or _EXAMPLE_EMAIL.search(text)
        or norm == _norm(name)
        or norm == _norm(name).removesuffix(" id")
        or (len(norm) > 8 and norm == description)
    )


def placeholder_arguments(arguments: dict[str, Any], properties: dict[str, Any]) -> list[str]:
    """Names of the top-level arguments whose values are placeholders."""
    return [k for k, v in arguments.items() if k in properties and is_placeholder(v, k, properties[k])]
