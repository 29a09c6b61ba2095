"""Drawing values: regex patterns, schema-shaped values, ids shaped like their argument."""

import re

import jsonschema
import numpy as np
import pytest

from sim_pipeline.world.options import WorldOptions
from sim_pipeline.world.patterns import draw_pattern
from sim_pipeline.world.values import draw_entity_id, draw_from_schema

OPTIONS = WorldOptions()


@pytest.mark.parametrize("pattern", [
    "^[0-9]{4,6}$", "^ORD-[A-Z]{2}\\d{3}$", "^(inv|ord)_[a-f0-9]+$", "[^a-z]{3}", "^[A-Z][a-z]*(-[A-Z][a-z]*)?$",
    "^\\w+@\\w+\\.com$", "^a.b?c*$",
])
def test_pattern_draws_match(pattern: str) -> None:
    gen = np.random.default_rng(0)
    for _ in range(20):
        value = draw_pattern(pattern, gen)
        assert value is not None and re.search(pattern, value)


@pytest.mark.parametrize("pattern", ["(?=x)a", "^\\p{L}+$", "(a)\\1", "[a-"])
def test_unsupported_patterns_give_none(pattern: str) -> None:
    assert draw_pattern(pattern, np.random.default_rng(0)) is None


def test_schema_draws_validate() -> None:
    schema = {"type": "object", "required": ["a", "b", "u", "n"], "properties": {
        "a": {"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 2},
        "b": {"enum": [1, 2]}, "u": {"type": "string", "format": "uuid"},
        "n": {"type": "object", "required": ["x"], "properties": {"x": {"type": "integer", "minimum": 5}}}}}
    gen = np.random.default_rng(1)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    for _ in range(20):
        validator.validate(draw_from_schema(schema, gen, OPTIONS))


def test_ids_follow_their_schema_and_run_out() -> None:
    gen = np.random.default_rng(2)
    assert isinstance(draw_entity_id({"type": "integer", "minimum": 1, "maximum": 9}, gen, OPTIONS, {}), int)
    assert re.fullmatch("^T-[0-9]{3}$", draw_entity_id({"type": "string", "pattern": "^T-[0-9]{3}$"}, gen, OPTIONS,
                                                       {}))
    taken = {"a": 1, "b": 1}
    assert draw_entity_id({"enum": ["a", "b"]}, gen, OPTIONS, taken) is None
