"""SFT cut: the best passing rollout per prompt, spread over behaviour signatures, with a loss mask.

Rejection-sampling fine-tuning keeps only rollouts that earned full reward (Yuan et al. 2023, "Scaling
relationship on learning mathematical reasoning with LLMs"). Best means fewest assistant turns, then
fewest tokens, then the smallest rollout_id, so the choice is deterministic. Each message gets a
`weight` key, 1 on assistant turns and 0 elsewhere: the loss mask of OpenAI's chat fine-tuning format.
"""

import json
from collections import Counter
from collections.abc import Hashable, Iterable
from typing import Any

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.cut.pool import PROMPT_KEYS, train_pool
from sim_pipeline.errors import CutError

SFT_COLUMNS = [
    "situation_id", "seed", "policy_version", "rollout_id", "phrasing_index", "behavior_signature",
    "messages", "tools", "reward", "judge_version", "sampling", "backends",
]
_SITUATION_KEYS = ["policy_version", "seed", "situation_id"]
_BEST_ORDER = ["n_turns", "n_tokens", "rollout_id"]


def select_for_sft(
    rollouts: pd.DataFrame,
    grades: pd.DataFrame,
    *,
    tools: list[dict[str, Any]],
    max_per_situation: int | None = defaults.SFT_MAX_PER_SITUATION,
    heldout_situation_ids: Iterable[str] = (),
    heldout_openings: Iterable[str] = (),
    pool_key: Hashable | None = None,
) -> pd.DataFrame:
    """One passing train conversation per prompt, ready for chat fine-tuning, sorted by prompt."""
    if max_per_situation is not None and max_per_situation < 1:
        raise CutError(f"max_per_situation must be at least 1 or None, got {max_per_situation}")
    pool = train_pool(
        rollouts, grades, heldout_situation_ids=heldout_situation_ids, heldout_openings=heldout_openings,
        key=pool_key,
    ).rows
    passing = pool[(pool["reward"] == defaults.PASS_REWARD) & pool["status"].isin(defaults.SFT_STATUSES)]
    best = (
        passing.sort_values(PROMPT_KEYS + _BEST_ORDER)
        .drop_duplicates(PROMPT_KEYS, keep="first")
        .reset_index(drop=True)
    )
    if max_per_situation is not None:
        best = _spread(best, max_per_situation)
    best = best.sort_values(PROMPT_KEYS + ["rollout_id"]).reset_index(drop=True)
    tools_json = json.dumps(tools, sort_keys=True, ensure_ascii=False)
    out = best.reindex(columns=SFT_COLUMNS)
    out["messages"] = pd.Series([_with_loss_mask(m) for m in best["messages"]], index=out.index, dtype=object)
    out["tools"] = tools_json
    return out


def _spread(best: pd.DataFrame, cap: int) -> pd.DataFrame:
    """Keep at most `cap` prompts per situation, preferring signatures the cut has picked least so far."""
    picked_counts: Counter[str] = Counter()
    keep: list[int] = []
    for _, situation in best.groupby(_SITUATION_KEYS, sort=True):
        candidates = situation.sort_values(_BEST_ORDER)
        if len(candidates) <= cap:
            keep.extend(candidates.index)
            picked_counts.update(candidates["behavior_signature"])
            continue
        remaining = list(candidates.index)
        for _ in range(cap):
            # `remaining` is in best-first order, so min() breaks ties by quality, then rollout_id.
            choice = min(remaining, key=lambda i: picked_counts[best.at[i, "behavior_signature"]])
            remaining.remove(choice)
            keep.append(choice)
            picked_counts[best.at[choice, "behavior_signature"]] += 1
    return best.loc[sorted(keep)]


def _rejected_calls(messages: list[dict[str, Any]]) -> set[str]:
    """Ids of tool calls the world refused as malformed (bad or placeholder arguments, unknown tool)."""
    refused = set()
    for m in messages:
        if m["role"] != "tool":
            continue
        try:
            result = json.loads(m.get("content") or "{}")
        except ValueError:
            continue
        if isinstance(result, dict) and result.get("error") in defaults.SFT_UNTAUGHT_ERRORS:
            refused.add(m.get("tool_call_id"))
    return refused


def _with_loss_mask(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages up to the last assistant turn, weight 1 on what the assistant wrote, else 0.

    An assistant turn whose tool call the world refused as malformed gets weight 0 too: a passing conversation
    may recover from such a call, but the call itself must not be imitated.
    """
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
    refused = _rejected_calls(messages)
    # Trailing user/tool turns carry no loss and chat fine-tuning formats want an assistant turn last.
    return [{**m, "weight": int(m["role"] == "assistant" and not any(
        c.get("id") in refused for c in m.get("tool_calls") or []))} for m in messages[: last + 1]]
