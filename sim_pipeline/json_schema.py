"""Tool argument JSON Schemas: validators whose regexes run in linear time, the one cache of compiled patterns, and
the load-time check that refuses a pattern that cannot run so.

A JSON Schema `pattern` (and a `patternProperties` key) is an ECMA-262 regex matched anywhere in the string.
jsonschema matches it with Python's backtracking `re`, where `^(a|a)*$` takes seconds on a 24-character argument and
five times as long for every two characters more; a tool schema is pack text and an argument is model output, so
neither may choose how long a check takes. Every pattern a tool schema holds is matched here with RE2 (the
`google-re2` package), in time linear in the text; RE2 cannot run backreferences or lookaround, so a pack pattern that
needs them is refused when the pack loads (`pattern_problem`) instead of being matched by a backtracking engine.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import jsonschema
import re2
from jsonschema.exceptions import ValidationError

from sim_pipeline import defaults

PATTERN_FIX = ("rewrite it without backreferences (\\1, \\k<name>) or lookaround ((?=, (?!, (?<=, (?<!), e.g. spell "
               "out the alternatives or check the part separately; tool patterns are matched with RE2, in linear time")
_QUIET = re2.Options()
_QUIET.log_errors = False  # a pattern RE2 refuses is reported by the loader with its file and field, not on stderr
_SURROGATE = re.compile("[\ud800-\udfff]")  # one character class: linear in the text


@dataclass(frozen=True)
class Compiled:
    """One pattern compiled by RE2: the regex, and one-pattern sets that only say whether it matches (about eight
    times cheaper a call than the regex's `search`, which works out every group's span)."""

    regex: Any
    anywhere: Any  # re2.Set, unanchored
    whole: Any  # re2.Set, anchored at both ends


@lru_cache(maxsize=defaults.SCHEMA_PATTERN_CACHE_SIZE)
def compiled(pattern: str) -> Compiled:
    """A JSON Schema pattern compiled by RE2, cached; raises re2.error when RE2 cannot run it."""
    regex = re2.compile(pattern, _QUIET)
    sets = []
    for make in (re2.Set.SearchSet, re2.Set.FullMatchSet):
        one = make(_QUIET)
        one.Add(pattern)
        one.Compile()
        sets.append(one)
    return Compiled(regex, *sets)


def _match(whole: bool, pattern: str, text: str) -> bool:
    found = compiled(pattern)
    try:
        if (found.whole if whole else found.anywhere).Match(text):
            return True
    except UnicodeEncodeError:  # a lone surrogate (JSON allows "\ud800"): RE2 reads UTF-8, so it stands in as U+FFFD
        text = _SURROGATE.sub("\ufffd", text)
    # A set also answers "no" when its DFA runs out of memory; the regex then falls back to RE2's NFA (linear too).
    return (found.regex.fullmatch if whole else found.regex.search)(text) is not None


def search(pattern: str, text: str) -> bool:
    """Whether a JSON Schema pattern matches anywhere in `text` (its JSON Schema meaning), in linear time."""
    return _match(False, pattern, text)


def fullmatch(pattern: str, text: str) -> bool:
    """Whether a pattern matches the whole of `text`, in linear time (recognising a value by its shape)."""
    return _match(True, pattern, text)


def refusal(pattern: str) -> str | None:
    """Why RE2 cannot run a pattern (its own words), or None when it can."""
    try:
        compiled(pattern)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)
    return None


# -- keywords that match regexes, as jsonschema's but with RE2 ---------------------------------------------------------
def _pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")  # jsonschema's own message


def _pattern_properties(validator: Any, patterns: dict[str, Any], instance: Any,
                        schema: dict[str, Any]) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any,
                           schema: dict[str, Any]) -> Iterator[ValidationError]:
    if "patternProperties" not in schema:  # no regex involved: jsonschema's own keyword, messages and all
        yield from jsonschema.Draft202012Validator.VALIDATORS["additionalProperties"](
            validator, additional, instance, schema)
        return
    if not validator.is_type(instance, "object"):
        return
    known, patterns = schema.get("properties", {}), list(schema["patternProperties"])
    extras = [k for k in instance if k not in known and not any(search(p, k) for p in patterns)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        verb = "does" if len(extras) == 1 else "do"
        yield ValidationError(f"{', '.join(repr(e) for e in sorted(extras))} {verb} not match any of the regexes: "
                              f"{', '.join(repr(p) for p in sorted(patterns))}")


_KEYWORDS = {"pattern": _pattern, "patternProperties": _pattern_properties,
             "additionalProperties": _additional_properties}


@cache
def _linear(cls: type) -> type:
    """A validator class that runs every regex keyword with RE2 (one class per draft)."""
    return jsonschema.validators.extend(cls, {k: f for k, f in _KEYWORDS.items() if k in cls.VALIDATORS})


def validator(schema: Any, *, formats: bool = True, cls: type = jsonschema.Draft202012Validator) -> Any:
    """A validator for `schema` (draft 2020-12 unless `cls` says, formats checked unless told not) whose `pattern`
    and `patternProperties` match with RE2. `unevaluatedProperties` still matches patternProperties with `re`, so a
    schema holding both is refused at load (`pattern_problem`)."""
    return _linear(cls)(schema, format_checker=jsonschema.FormatChecker() if formats else None)


@lru_cache(maxsize=defaults.SCHEMA_VALIDATOR_CACHE_SIZE)
def _checker(schema_json: str) -> Any:
    return validator(json.loads(schema_json))


def fits(value: Any, schema: dict[str, Any]) -> bool:
    """Whether a value satisfies a JSON Schema (formats checked): a value drawn for an argument must."""
    try:
        return _checker(json.dumps(schema, sort_keys=True)).is_valid(value)
    except (TypeError, ValueError):
        return False


# -- the load-time check -----------------------------------------------------------------------------------------------
_NAME_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")  # name -> subschema
_DATA_KEYWORDS = ("enum", "const", "default", "examples")  # their values are data, never schemas


def _subschemas(schema: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every mapping of a schema but its data, with its JSON path ('properties/code'), in document order. Any mapping
    counts (a `$ref` may name one under an unknown keyword); under a name map the keys are names, not keywords."""
    stack: list[tuple[tuple[str, ...], Any]] = [((), schema)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, list):
            stack.extend(((*path, str(i)), item) for i, item in reversed(list(enumerate(node))))
            continue
        if not isinstance(node, dict):
            continue
        yield "/".join(path), node
        children: list[tuple[tuple[str, ...], Any]] = []
        for key, value in node.items():
            if key in _DATA_KEYWORDS:
                continue
            if key in _NAME_MAPS and isinstance(value, dict):
                children.extend(((*path, key, str(name)), sub) for name, sub in value.items())
            else:
                children.append(((*path, str(key)), value))
        stack.extend(reversed(children))


@dataclass(frozen=True)
class PatternProblem:
    """Why a schema's regexes cannot all be matched in linear time: where (a JSON path in the schema), what, the fix."""

    path: str
    problem: str
    fix: str


def _cannot(pattern: str, reason: str) -> str:
    # Spelled as in a JSON (or double-quoted YAML) file, so the author can search for it.
    return f"pattern {json.dumps(pattern)} cannot be matched in linear time (RE2 refuses it: {reason})"


def pattern_problem(schema: Any) -> PatternProblem | None:
    """The first regex of a JSON Schema that RE2 cannot run (every `pattern` and `patternProperties` key, at any
    depth), or a use of patternProperties that jsonschema would match with `re`; None when every regex is safe."""
    holds_pattern_properties = False
    for path, node in _subschemas(schema):
        at = f"{path}/" if path else ""
        if isinstance(node.get("pattern"), str):
            reason = refusal(node["pattern"])
            if reason is not None:
                return PatternProblem(f"{at}pattern", _cannot(node["pattern"], reason), PATTERN_FIX)
        if isinstance(node.get("patternProperties"), dict):
            holds_pattern_properties = True
            for key in node["patternProperties"]:
                reason = refusal(str(key))
                if reason is not None:
                    return PatternProblem(f"{at}patternProperties/{key}", _cannot(str(key), reason), PATTERN_FIX)
    if holds_pattern_properties:
        unevaluated = next((p for p, n in _subschemas(schema) if "unevaluatedProperties" in n), None)
        if unevaluated is not None:
            return PatternProblem(f"{unevaluated}/unevaluatedProperties".lstrip("/"), "unevaluatedProperties in a "
                                  "schema with patternProperties: jsonschema would match the property names against "
                                  "those patterns with Python's backtracking regex engine",
                                  "use additionalProperties beside the patternProperties instead")
    return None
