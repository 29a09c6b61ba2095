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


# -- schema-true values over random schemas ----------------------------------------------------------------------
PATTERNS = ["^[0-9]{5}$", "^C[0-9]{4}$", "^[A-Z]{3}-[0-9]{2,4}$", "^(eco|biz)_[a-z]{3,6}$"]
FORMATS = ["email", "date", "date-time", "uuid", "ipv4"]


def _strings():
    from hypothesis import strategies as st

    plain = st.builds(lambda lo, span: {"type": "string", "minLength": lo, "maxLength": lo + span},
                      st.integers(0, 12), st.integers(0, 30))
    return st.one_of(
        st.just({"type": "string"}), plain,
        st.sampled_from(PATTERNS).map(lambda p: {"type": "string", "pattern": p}),
        st.sampled_from(FORMATS).map(lambda f: {"type": "string", "format": f}),
        st.lists(st.text("abcxyz ", min_size=1, max_size=6), min_size=1, max_size=4, unique=True).map(
            lambda vs: {"type": "string", "enum": vs}))


def _numbers():
    from hypothesis import strategies as st

    def bounded(kind, lo, span, exclusive):
        schema = {"type": kind, ("exclusiveMinimum" if exclusive else "minimum"): lo}
        schema["exclusiveMaximum" if exclusive else "maximum"] = lo + span + (2 if exclusive else 0)
        return schema
    return st.one_of(st.sampled_from([{"type": "integer"}, {"type": "number"}, {"type": "boolean"}]),
                     st.builds(bounded, st.sampled_from(["integer", "number"]), st.integers(-50, 50),
                               st.integers(0, 40), st.booleans()))


def _schemas():
    from hypothesis import strategies as st

    def obj(props, n_required):
        names = sorted(props)
        return {"type": "object", "properties": props, "required": names[:n_required], "additionalProperties": False}

    def arr(items, lo, span):
        return {"type": "array", "items": items, "minItems": lo, "maxItems": lo + span}

    return st.recursive(st.one_of(_strings(), _numbers()), lambda inner: st.one_of(
        st.builds(arr, inner, st.integers(0, 3), st.integers(0, 3)),
        st.builds(obj, st.dictionaries(st.sampled_from(["street", "city", "zip", "dish", "quantity", "when", "id"]),
                                       inner, min_size=1, max_size=4), st.integers(0, 4))), max_leaves=8)


def test_every_drawn_value_satisfies_its_schema() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=300, deadline=None)
    @given(_schemas(), st.integers(0, 2**32 - 1))
    def check(schema, seed):
        validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
        value = draw_from_schema(schema, np.random.default_rng(seed), OPTIONS, name="value")
        errors = [e.message for e in validator.iter_errors(value)]
        assert not errors, (schema, value, errors)

    check()


@pytest.mark.parametrize(("field", "parts"), [("first_name", 1), ("givenName", 1), ("lastName", 1), ("surname", 1),
                                              ("family_name", 1), ("name", 2), ("full_name", 2)])
def test_a_name_part_field_gets_one_part(field: str, parts: int) -> None:
    """A passenger's first_name is 'Ana', not 'Ana Berg' (a reader fails a booking with names in the wrong fields)."""
    drawn = draw_from_schema({"type": "object", "required": [field], "properties": {field: {"type": "string"}}},
                             np.random.default_rng(3), OPTIONS)
    assert len(drawn[field].split()) == parts
