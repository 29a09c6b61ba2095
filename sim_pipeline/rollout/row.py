"""The rollout row: its Arrow schema (how it is stored) and its JSON Schema (what the row_schema check enforces)."""

from __future__ import annotations

import json
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


def row_errors(rows: list[dict[str, Any]], *, limit: int = 5) -> list[str]:
    """Messages for rows that do not match row.schema.json (at most `limit`)."""
    out: list[str] = []
    for row in rows:
        for error in _validator().iter_errors(row):
            where = "/".join(str(p) for p in error.absolute_path) or "(row)"
            out.append(f"rollout {row.get('rollout_id')}: {where}: {error.message}")
            if len(out) >= limit:
                return out
    return out
