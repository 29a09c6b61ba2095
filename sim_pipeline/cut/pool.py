"""The graded, decontaminated train rollouts every cut draws from, with messages in OpenAI wire format.

Messages keep the OpenAI chat shape with every key present (role, content, tool_calls, tool_call_id, name;
None where absent) so Parquet stores them as one fixed struct; exporters drop the None keys.
A prompt is one (policy_version, seed, situation_id, phrasing_index): the samples of one phrasing.
"""

import hashlib
import json
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.cut.decontaminate import decontaminate
from sim_pipeline.errors import CutError
from sim_pipeline.models.provenance import records

MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")
ROLES = frozenset({"system", "user", "assistant", "tool"})
TRAIN_SPLIT = "train"
HELDOUT_SPLIT = "heldout"
PROMPT_KEYS = ["policy_version", "seed", "situation_id", "phrasing_index"]
ROLLOUT_COLUMNS = (
    "rollout_id", "situation_id", "seed", "policy_version", "split", "phrasing_index", "tool_condition",
    "messages", "opening_message", "status", "n_tokens", "behavior_signature", "sampling",
)
GRADE_COLUMNS = ("rollout_id", "reward", "judge_status", "judge_version")


@dataclass(frozen=True)
class TrainPool:
    """Train rows fit for cutting, plus how many rows each filter removed and the train group sizes."""

    rows: pd.DataFrame
    removed: dict[str, int]
    train_group_sizes: pd.Series  # train rollouts per prompt before grading filters: tells a complete group


def require_columns(frame: pd.DataFrame, columns: Iterable[str], *, name: str) -> None:
    """Raise CutError naming the columns a frame lacks."""
    missing = [column for column in columns if column not in frame.columns]
    if missing:
        raise CutError(f"{name} lacks columns {missing}: pass the table the previous step wrote")


def normalize_messages(messages: Sequence[Mapping] | None) -> list[dict[str, Any]]:
    """Plain OpenAI chat messages from any sequence of mappings (lists, or numpy arrays read from Parquet)."""
    out = []
    for message in [] if messages is None else messages:
        role = message.get("role")
        if role not in ROLES:
            raise CutError(f"message role {role!r} is not one of {sorted(ROLES)}: fix the rollout's messages")
        plain = {key: _plain(message.get(key)) for key in MESSAGE_KEYS}
        plain["tool_calls"] = _normalize_tool_calls(message.get("tool_calls"))
        out.append(plain)
    return out


def split_prompt(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Messages up to and including the first user turn, and the rest."""
    users = [i for i, message in enumerate(messages) if message["role"] == "user"]
    first_user = users[0] if users else len(messages) - 1
    return messages[: first_user + 1], messages[first_user + 1 :]


def assistant_chars(messages: list[dict[str, Any]]) -> int:
    """Characters the assistant wrote: reply text plus tool-call names and arguments (what a loss sees)."""
    total = 0
    for message in messages:
        if message["role"] != "assistant":
            continue
        total += len(message["content"] or "")
        for call in message["tool_calls"] or []:
            total += len(call["function"]["name"] or "") + len(call["function"]["arguments"] or "")
    return total


def prompt_key(prompt: list[dict[str, Any]]) -> str:
    """A content hash of a prompt, so rows are only compared when they saw the same prompt."""
    canonical = json.dumps(prompt, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def graded_mask(grades: pd.DataFrame) -> np.ndarray:
    """Grade rows whose reward stands: a finite reward and a judge status in GRADED_JUDGE_STATUSES."""
    reward = pd.to_numeric(grades["reward"], errors="coerce").to_numpy(dtype=float)
    status_ok = grades["judge_status"].isin(defaults.GRADED_JUDGE_STATUSES).to_numpy(dtype=bool)
    return np.isfinite(reward) & status_ok


# (content key, held-out ids, held-out openings) -> the pool built from them: the five cuts of a partition share one.
_POOLS: OrderedDict[Hashable, TrainPool] = OrderedDict()


def train_pool(
    rollouts: pd.DataFrame,
    grades: pd.DataFrame,
    *,
    heldout_situation_ids: Iterable[str] = (),
    heldout_openings: Iterable[str] = (),
    key: Hashable | None = None,
) -> TrainPool:
    """Join rollouts to grades and keep graded train rows that leak nothing held out, in wire format.

    `key`, when given, names the content of `rollouts` and `grades` (the sha256 of the files they were read from):
    a later call with the same key and held-out sets gets a copy of the pool built the first time, so the cuts of
    one partition convert its rollouts to Python once. Rows a caller built or edited must not pass a key."""
    if key is None:
        return _train_pool(rollouts, grades, heldout_situation_ids=heldout_situation_ids,
                           heldout_openings=heldout_openings)
    ids, openings = frozenset(heldout_situation_ids), tuple(heldout_openings)
    full_key = (key, ids, openings)
    pool = _POOLS.get(full_key)
    if pool is None:
        pool = _train_pool(rollouts, grades, heldout_situation_ids=ids, heldout_openings=openings)
        _POOLS[full_key] = pool
        while len(_POOLS) > defaults.CUT_POOL_CACHE_SIZE:
            _POOLS.popitem(last=False)
    # A copy per cut: a cut that adds or reorders columns does not change the next cut's pool.
    return TrainPool(rows=pool.rows.copy(), removed=dict(pool.removed), train_group_sizes=pool.train_group_sizes.copy())


def _train_pool(
    rollouts: pd.DataFrame,
    grades: pd.DataFrame,
    *,
    heldout_situation_ids: Iterable[str],
    heldout_openings: Iterable[str],
) -> TrainPool:
    """train_pool, computed."""
    require_columns(rollouts, ROLLOUT_COLUMNS, name="rollouts")
    require_columns(grades, GRADE_COLUMNS, name="grades")
    for name, frame in (("rollouts", rollouts), ("grades", grades)):
        duplicated = frame["rollout_id"][frame["rollout_id"].duplicated()]
        if len(duplicated):
            examples = sorted(set(duplicated))[:3]
            raise CutError(f"{name} repeats rollout_id {examples}: keep one row per rollout")
    unknown = set(rollouts["split"]) - {TRAIN_SPLIT, HELDOUT_SPLIT}
    if unknown:
        raise CutError(
            f"rollouts have split values {sorted(unknown)}: use {TRAIN_SPLIT!r} or {HELDOUT_SPLIT!r}"
        )

    # Held-out situations come from this frame and from the caller (held-out rows may live elsewhere).
    heldout = rollouts[rollouts["split"] == HELDOUT_SPLIT]
    heldout_ids = set(heldout["situation_id"]) | set(heldout_situation_ids)
    if "split" in grades.columns and "situation_id" in grades.columns:
        heldout_ids |= set(grades.loc[grades["split"] == HELDOUT_SPLIT, "situation_id"])
    openings = [*heldout["opening_message"].dropna(), *heldout_openings]

    train = rollouts[rollouts["split"] == TRAIN_SPLIT]
    train, heldout_removed = decontaminate(
        train, heldout_situation_ids=heldout_ids, heldout_openings=openings
    )
    group_sizes = train.groupby(PROMPT_KEYS).size()

    grade_columns = list(GRADE_COLUMNS) + [c for c in ("conduct_rule", "backends") if c in grades.columns]
    graded = grades.loc[graded_mask(grades), grade_columns]
    if "backends" in graded.columns:  # the grade's records name the judge too: they replace the rollout's
        train = train.drop(columns=["backends"], errors="ignore")
    joined = train.merge(graded, on="rollout_id", how="inner", validate="one_to_one")
    ungraded = len(train) - len(joined)
    excluded = joined["status"].isin(defaults.CUT_EXCLUDED_STATUSES).to_numpy(dtype=bool)
    joined = joined.loc[~excluded].copy()
    joined["reward"] = joined["reward"].astype(float)

    messages = [normalize_messages(m) for m in joined["messages"]]
    prompts, completions = zip(*(split_prompt(m) for m in messages), strict=True) if messages else ((), ())
    replied = np.fromiter(
        (any(m["role"] == "assistant" for m in c) for c in completions), dtype=bool, count=len(completions)
    )
    joined["messages"] = pd.Series(messages, index=joined.index, dtype=object)
    joined["prompt"] = pd.Series(prompts, index=joined.index, dtype=object)
    joined["completion"] = pd.Series(completions, index=joined.index, dtype=object)
    joined["prompt_key"] = [prompt_key(p) for p in prompts]
    joined["n_turns"] = [sum(m["role"] == "assistant" for m in c) for c in completions]
    joined["assistant_chars"] = [assistant_chars(c) for c in completions]
    joined["sampling"] = pd.Series([_plain(s) for s in joined["sampling"]], index=joined.index, dtype=object)
    if "backends" in joined.columns:
        joined["backends"] = pd.Series([records(b) for b in joined["backends"]], index=joined.index, dtype=object)
    # A completion without any assistant turn (the agent never answered) teaches nothing.
    rows = joined.loc[replied].sort_values(PROMPT_KEYS + ["rollout_id"]).reset_index(drop=True)
    removed = {
        "heldout": heldout_removed,
        "ungraded": ungraded,
        "excluded_status": int(excluded.sum()),
        "no_reply": int((~replied).sum()),
    }
    return TrainPool(rows=rows, removed=removed, train_group_sizes=group_sizes)


def _normalize_tool_calls(calls: Sequence[Mapping] | None) -> list[dict[str, Any]] | None:
    if calls is None or len(calls) == 0:
        return None
    out = []
    for call in calls:
        function = call["function"]
        arguments = function.get("arguments")
        # Wire format carries arguments as a JSON string; a decoded mapping is re-encoded canonically.
        if isinstance(arguments, Mapping):
            arguments = json.dumps(_plain(arguments), sort_keys=True, ensure_ascii=False)
        out.append({
            "id": _plain(call.get("id")),
            "type": _plain(call.get("type")) or "function",
            "function": {"name": _plain(function.get("name")), "arguments": arguments},
        })
    return out


def _plain(value: Any) -> Any:
    """Python builtins from numpy scalars, arrays and mappings (what Parquet round-trips return)."""
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, np.ndarray | list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return value
