"""Strings that match a JSON Schema `pattern`: a small sampler over the regex subset tool schemas use.

Supported: literals, escapes (\\d \\w \\s and escaped punctuation), `.`, classes with ranges and negation, groups
(capturing or `(?:...)`) with `|`, and the quantifiers `? * + {n} {n,} {n,m}` (open ones draw at most
`defaults.WORLD_PATTERN_MAX_REPEAT` extra copies). Anything else (lookarounds, backreferences, \\p{...}) gives None,
and every drawn string is checked with the schema's own matcher (RE2, json_schema.py) before it is returned.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
import re2

from sim_pipeline import defaults, json_schema

_WORD = string.ascii_letters + string.digits + "_"
_ANY = string.ascii_letters + string.digits + " -_."
_ESCAPES = {"d": string.digits, "w": _WORD, "s": " "}


class _Unsupported(Exception):
    """A regex feature the sampler does not draw from (lookarounds, backreferences, \\D...)."""


def _parse(pattern: str) -> Any:
    pos = 0

    def alt() -> tuple[str, list[Any]]:
        nonlocal pos
        branches = [seq()]
        while pos < len(pattern) and pattern[pos] == "|":
            pos += 1
            branches.append(seq())
        return ("alt", branches)

    def seq() -> list[Any]:
        items = []
        while pos < len(pattern) and pattern[pos] not in "|)":
            items.append((atom(), *quantifier()))
        return items

    def atom() -> Any:
        nonlocal pos
        char = pattern[pos]
        pos += 1
        if char == "(":
            if pattern.startswith("?:", pos):
                pos += 2
            elif pattern.startswith("?", pos):
                raise _Unsupported("lookaround or named group")
            inner = alt()
            if pos >= len(pattern) or pattern[pos] != ")":
                raise _Unsupported("unbalanced group")
            pos += 1
            return inner
        if char == "[":
            return ("chars", char_class())
        if char == "\\":
            return ("chars", escape())
        if char in "^$":
            return ("chars", "")
        return ("chars", _ANY if char == "." else char)

    def escape() -> str:
        nonlocal pos
        char = pattern[pos]
        pos += 1
        if char in _ESCAPES:
            return _ESCAPES[char]
        if char.isalnum():
            raise _Unsupported(f"escape \\{char}")
        return char

    def char_class() -> str:
        nonlocal pos
        negate = pattern.startswith("^", pos)
        pos += negate
        chars: list[str] = []
        while pattern[pos] != "]" or not chars:
            if pattern[pos] == "\\":
                pos += 1
                chars.extend(escape())
            elif pattern[pos + 1] == "-" and pattern[pos + 2] != "]":
                chars.extend(chr(c) for c in range(ord(pattern[pos]), ord(pattern[pos + 2]) + 1))
                pos += 3
            else:
                chars.append(pattern[pos])
                pos += 1
        pos += 1
        pool = "".join(sorted(set(chars)))
        return "".join(c for c in _ANY if c not in pool) if negate else pool

    def quantifier() -> tuple[int, int | None]:
        nonlocal pos
        low, high = 1, 1
        if pos < len(pattern) and pattern[pos] in "*+?":
            low, high = {"*": (0, None), "+": (1, None), "?": (0, 1)}[pattern[pos]]
            pos += 1
        elif pos < len(pattern) and pattern[pos] == "{":
            end = pattern.index("}", pos)
            parts = pattern[pos + 1:end].split(",")
            low = int(parts[0] or 0)
            high = low if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
            pos = end + 1
        if pos < len(pattern) and pattern[pos] in "?+":
            pos += 1  # lazy or possessive: the same strings
        return low, high

    tree = alt()
    if pos != len(pattern):
        raise _Unsupported("stray ')'")
    return tree


def _draw(node: Any, gen: np.random.Generator, out: list[str]) -> None:
    if node[0] == "chars":
        if node[1]:
            out.append(node[1][gen.integers(len(node[1]))])
        return
    branch = node[1][gen.integers(len(node[1]))]
    for child, low, high in branch:
        top = low + defaults.WORLD_PATTERN_MAX_REPEAT if high is None else high
        for _ in range(int(gen.integers(low, max(low, top) + 1))):
            _draw(child, gen, out)


def draw_pattern(pattern: str, gen: np.random.Generator) -> str | None:
    """A string matching a JSON Schema `pattern`, or None when the pattern uses features the sampler lacks."""
    try:
        out: list[str] = []
        _draw(_parse(pattern), gen, out)
        text = "".join(out)
        return text if json_schema.search(pattern, text) else None
    except (_Unsupported, IndexError, ValueError, re2.error):
        return None
