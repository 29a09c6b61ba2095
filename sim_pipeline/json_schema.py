"""Whether a value satisfies a tool argument's JSON Schema: one cached validator per schema, shared by the world
(drawn values must fit) and the rule kinds (a stressed argument must still fit)."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import jsonschema


@lru_cache(maxsize=512)
def _checker(schema_json: str) -> Any:
    return jsonschema.Draft202012Validator(json.loads(schema_json), format_checker=jsonschema.FormatChecker())


def fits(value: Any, schema: dict[str, Any]) -> bool:
    """Whether a value satisfies a JSON Schema (formats checked): a value drawn for an argument must."""
    try:
        return _checker(json.dumps(schema, sort_keys=True)).is_valid(value)
    except (TypeError, ValueError):
        return False
