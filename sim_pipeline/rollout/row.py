"""The rollout row: its Arrow schema (how it is stored) and its JSON Schema (what the row_schema check enforces)."""

from __future__ import annotations

import json
import numbers
import re
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
import pandas as pd
import pyarrow as pa

from sim_pipeline.situation import AXES

ROW_JSON_SCHEMA = Path(__file__).with_name("row.schema.json")
TOOL_CALL = pa.struct([("id", pa.string()), ("type", pa.string()),
                       ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))])
MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string()), ("tool_calls", pa.list_(TOOL_CALL)),
                     ("tool_call_id", pa.string()), ("name", pa.string())])
TOOL_EVENT = pa.struct([("index", pa.int64()), ("tool", pa.string()), ("arguments", pa.string()),
                        ("status", pa.string()), ("entity_id", pa.string()), ("applied", pa.bool_()),
                        ("turn", pa.int64()), ("error", pa.string()),
                        ("field", pa.string())])
# turn: the message index of the tool result; error and field: a rejection's reason (missing_required,
# invalid_argument, ...) and the argument it is about (a path inside a nested one: items/0/dish)
USER_EVENT = pa.struct([("turn", pa.int64()), ("decision", pa.string())])  # protocol/user_events.py
SAMPLING = pa.struct([("temperature", pa.float64()), ("top_p", pa.float64()), ("max_tokens", pa.int64()),
                      ("seed", pa.int64()), ("user_model", pa.string()), ("reply_classifier", pa.string()),
                      ("endpoint", pa.string()), ("dropped_params", pa.list_(pa.string()))])
# Which backend made the row, per role (models/provenance.py): never a key, only names, the host and a hash.
BACKEND = pa.struct([("role", pa.string()), ("entry", pa.string()), ("model", pa.string()), ("endpoint", pa.string()),
                     ("params_sent", pa.string()), ("params_dropped", pa.list_(pa.string())),
                     ("config_sha256", pa.string())])
ROLLOUT_SCHEMA = pa.schema([
    ("rollout_id", pa.string()), ("situation_id", pa.string()), ("seed", pa.int64()),
    ("policy_version", pa.string()), ("split", pa.string()), ("arm", pa.string()), ("batch", pa.int64()),
    ("phrasing_index", pa.int64()), ("sample_index", pa.int64()),
    *[(a, pa.string()) for a in AXES],
    ("messages", pa.list_(MESSAGE)), ("opening_message", pa.string()), ("final_text", pa.string()),
    ("finish_reason", pa.string()), ("status", pa.string()), ("error", pa.string()),
    ("logprob", pa.float64()), ("n_tokens", pa.int64()), ("token_logprobs", pa.list_(pa.float64())),
    ("logprob_source", pa.string()), ("tokens", pa.list_(pa.string())), ("turn_token_counts", pa.list_(pa.int64())),
    ("logprob_coverage", pa.float64()), ("model", pa.string()), ("sampling", SAMPLING),
    ("backends", pa.list_(BACKEND)),
    ("behavior_signature", pa.string()), ("behavior", pa.string()), ("tool_events", pa.list_(TOOL_EVENT)),
    ("user_events", pa.list_(USER_EVENT)),
    ("n_turns", pa.int64()), ("oracle_reward", pa.float64()), ("oracle_reason", pa.string()),
    ("oracle_check", pa.string()),  # the name of the oracle check that failed the rollout (world/oracle.py), "" on a pass
    ("prompt_tokens", pa.int64()), ("cost", pa.float64()), ("model_calls", pa.int64()),
    ("markup_repaired", pa.int64()),  # replies (agent's and user's) whose leaked chat-format markup was repaired
])
# Wall-clock fields the runner measures but the table leaves out: with them, two runs of one seed would differ
# in bytes. The rollouts asset's metadata summarises them instead.
TIMING_COLUMNS = ("latency_s",)


def rollout_table(rows: pd.DataFrame) -> pa.Table:
    """Rows as an Arrow table with the fixed rollout schema (an empty frame gives an empty table)."""
    if not len(rows):
        return ROLLOUT_SCHEMA.empty_table()
    return pa.Table.from_pandas(rows[ROLLOUT_SCHEMA.names], schema=ROLLOUT_SCHEMA, preserve_index=False)


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(ROW_JSON_SCHEMA.read_text()))


Check = Callable[[Any], bool]
# JSON types as the plain Python values a valid row holds; any other value (a bool for "integer", a numpy scalar, a
# subclass) is left to jsonschema, which decides.
_PLAIN_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float),
                                              "object": (dict,), "array": (list,), "null": (type(None),)}


def _when(plain: tuple[type, ...], base: type | tuple[type, ...], test: Check) -> Check:
    """A keyword's check: `test` on a value of a plain type; True (the keyword does not apply) on a value that is no
    `base`; False (ask jsonschema) on any other `base`, such as a subclass or a numpy scalar."""
    return lambda x: test(x) if type(x) in plain else not isinstance(x, base)


def _surely_valid(schema: dict[str, Any]) -> Check:
    """A check that returns True only for an instance jsonschema would find valid against `schema` (the keywords
    row.schema.json uses); False means "ask jsonschema". One jsonschema pass per row was ~0.3 s per 500 rollouts,
    most of a row_schema check; this is about 8 times faster and leaves every message to jsonschema."""
    checks: list[Check] = []
    number = (int, float)  # plain numbers (a bool, also a Number to isinstance, goes to jsonschema)
    for key, value in schema.items():
        if key in ("$schema", "title"):
            continue
        if key == "type":
            plain = tuple(t for name in ([value] if isinstance(value, str) else value) for t in _PLAIN_TYPES[name])
            checks.append(lambda x, plain=plain: type(x) in plain)
        elif key in ("enum", "const"):  # the same type and value (jsonschema's equality is looser: it decides)
            allowed = [(type(v), v) for v in (value if key == "enum" else [value])]
            checks.append(lambda x, allowed=allowed: (type(x), x) in allowed)
        elif key == "required":
            checks.append(_when((dict,), dict, lambda x, names=tuple(value): all(n in x for n in names)))
        elif key == "properties":
            nested = {name: _surely_valid(sub) for name, sub in value.items()}
            checks.append(_when((dict,), dict, lambda x, nested=nested:
                                all(name not in x or check(x[name]) for name, check in nested.items())))
        elif key == "items":
            item = _surely_valid(value)
            checks.append(_when((list,), list, lambda x, item=item: all(item(v) for v in x)))
        elif key == "minItems":
            checks.append(_when((list,), list, lambda x, n=value: len(x) >= n))
        elif key == "minLength":  # jsonschema counts code points, as len does
            checks.append(_when((str,), str, lambda x, n=value: len(x) >= n))
        elif key == "minimum":
            checks.append(_when(number, numbers.Number, lambda x, bound=value: x >= bound))
        elif key == "maximum":
            checks.append(_when(number, numbers.Number, lambda x, bound=value: x <= bound))
        elif key == "pattern":  # jsonschema matches with re.search too
            checks.append(_when((str,), str, lambda x, p=re.compile(value): p.search(x) is not None))
        else:  # a keyword this check does not know: every instance goes to jsonschema
            return lambda x: False
    return lambda x: all(check(x) for check in checks)


@lru_cache(maxsize=1)
def _fast_check() -> Check:
    return _surely_valid(json.loads(ROW_JSON_SCHEMA.read_text()))


def row_errors(rows: list[dict[str, Any]], *, limit: int = 5, fast: bool = True) -> list[str]:
    """Messages for rows that do not match row.schema.json (at most `limit`); `fast=False` sends every row to
    jsonschema (the reference the fast check is tested against)."""
    out: list[str] = []
    for row in rows:
        if fast and _fast_check()(row):
            continue
        for error in _validator().iter_errors(row):
            where = "/".join(str(p) for p in error.absolute_path) or "(row)"
            out.append(f"rollout {row.get('rollout_id')}: {where}: {error.message}")
            if len(out) >= limit:
                return out
    return out
