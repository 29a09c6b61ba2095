"""Schema regexes on RE2: the shipped packs' patterns decide as Python's `re` did, jsonschema's messages are kept, and
the load-time check finds every regex a schema holds."""

import json
import re

import jsonschema
import numpy as np
import pytest

from sim_pipeline import json_schema
from sim_pipeline.domain import DOMAINS_DIR, load_domain
from sim_pipeline.world.patterns import draw_pattern

SHIPPED = sorted(p.name for p in DOMAINS_DIR.iterdir() if (p / "domain.yaml").is_file())


def _shipped_patterns() -> list[str]:
    found = set()
    for name in SHIPPED:
        domain = load_domain(name)
        for tool in domain.tools:
            found |= {n["pattern"] for _, n in json_schema._subschemas(tool.parameters) if "pattern" in n}
        found |= {e.id_pattern for e in domain.entities if e.id_pattern}
    return sorted(found)


def test_the_shipped_patterns_decide_as_python_re_did() -> None:
    patterns = _shipped_patterns()
    assert len(patterns) >= 8
    gen = np.random.default_rng(0)
    for pattern in patterns:
        drawn = [draw_pattern(pattern, gen) for _ in range(20)]
        assert all(d is not None for d in drawn), pattern
        probes = drawn + [d[:-1] for d in drawn] + [d + "7" for d in drawn] + [" " + d for d in drawn] + [
            "", "48213", "C1234", "BK12AB34", "card_123456", "x", "١٢٣٤٥"]  # Arabic-Indic digits: see below
        for text in probes:
            ascii_only = text.isascii()  # `re`'s \d takes any Unicode digit; ECMA-262 (and RE2) only 0-9
            assert json_schema.search(pattern, text) == (bool(re.search(pattern, text)) and ascii_only), (pattern, text)


def test_patterns_search_anywhere_and_dollar_ends_the_text() -> None:
    assert json_schema.search("b[0-9]", "ab1c") and not json_schema.search("^b", "ab")
    assert json_schema.fullmatch("[0-9]{5}", "48213") and not json_schema.fullmatch("[0-9]{5}", "482130")
    assert not json_schema.search("^[0-9]+$", "123\n")  # ECMA-262: `$` is the end; Python's `re` allowed a newline
    assert json_schema.search("^.$", "\ud800")  # a lone surrogate (JSON allows one) is a character, not an error


def test_validator_messages_are_jsonschemas() -> None:
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^[A-Z]{2}$"}},
              "patternProperties": {"^x_": {"type": "integer"}}, "additionalProperties": False}
    for instance in ({"code": "abc"}, {"x_1": "one", "y": 2, "z": 3}, {"code": "AB", "x_2": 2}):
        ours = sorted(e.message for e in json_schema.validator(schema).iter_errors(instance))
        theirs = sorted(e.message for e in jsonschema.Draft202012Validator(
            schema, format_checker=jsonschema.FormatChecker()).iter_errors(instance))
        assert ours == theirs, instance


def test_an_adversarial_value_is_refused_by_every_regex_keyword() -> None:
    evil = "a" * 40 + "!"
    schema = {"type": "object", "properties": {"code": {"pattern": "^(a|a)*$"}},
              "patternProperties": {"^(a|a)*$": {"type": "integer"}}, "propertyNames": {"pattern": "^(a|a)*$|code"},
              "additionalProperties": False}
    check = json_schema.validator(schema)
    assert not check.is_valid({"code": evil}) and not check.is_valid({evil: 1}) and check.is_valid({"aa": 1})
    assert not json_schema.fits(evil, {"pattern": "^(a|a)*$"})


def test_pattern_problem_finds_regexes_at_any_depth_but_not_in_data() -> None:
    bad = r"^(a)\1$"
    assert json_schema.pattern_problem({"type": "object", "properties": {"pattern": {"type": "string"}},
                                        "enum": [{"pattern": bad}], "examples": [{"pattern": bad}]}) is None
    for schema, path in (({"items": [{"pattern": bad}]}, "items/0/pattern"),
                         ({"properties": {"a": {"anyOf": [{"type": "integer"}, {"pattern": bad}]}}},
                          "properties/a/anyOf/1/pattern"),
                         ({"patternProperties": {bad: {}}}, f"patternProperties/{bad}"),
                         ({"$defs": {"pattern": {"pattern": bad}}}, "$defs/pattern/pattern")):
        problem = json_schema.pattern_problem(schema)
        assert problem is not None and problem.path == path, schema
        assert json.dumps(bad) in problem.problem and "backreferences" in problem.fix


def test_draw_pattern_checks_its_draws_with_re2() -> None:
    assert draw_pattern("^(a|a)*$", np.random.default_rng(0)) is not None
    assert draw_pattern(r"^(a)\1$", np.random.default_rng(0)) is None  # never reaches the world: refused at load


@pytest.mark.parametrize("pattern", ["^[0-9]{4,6}$", "^(card|pts|vch)_[0-9]{6}$"])
def test_compiled_patterns_are_cached(pattern: str) -> None:
    assert json_schema.compiled(pattern) is json_schema.compiled(pattern)
