"""GRPO cut: whole groups of samples of one prompt whose pass rate sits in the learnable band.

GRPO's advantage is each reward minus its group's mean (Shao et al. 2024, DeepSeekMath), so a group
that all passes or all fails teaches nothing; DAPO drops such groups (Yu et al. 2025). We keep groups of
k >= GRPO_MIN_GROUP with pass rate in [GRPO_PASS_RATE_MIN, GRPO_PASS_RATE_MAX], never split a group,
and keep a group only when every train rollout of its prompt survived grading (a partly graded group
would bias the group mean). Groups are ordered round-robin over tool_condition so any prefix of the
cut mixes fault kinds.
"""

from collections.abc import Hashable, Iterable

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.cut.pool import PROMPT_KEYS, train_pool

GRPO_COLUMNS = [
    "group_id", "situation_id", "seed", "policy_version", "phrasing_index", "rollout_id", "prompt", "completion", "reward",
    "group_pass_rate", "group_size", "tool_condition", "judge_version", "sampling", "backends",
]
# Samples form one group only when they saw the same prompt text and were graded by the same judge.
_GROUP_KEYS = PROMPT_KEYS + ["prompt_key", "judge_version"]


def select_for_rl(
    rollouts: pd.DataFrame,
    grades: pd.DataFrame,
    *,
    heldout_situation_ids: Iterable[str] = (),
    heldout_openings: Iterable[str] = (),
    pool_key: Hashable | None = None,
) -> tuple[pd.DataFrame, dict]:
    """Whole mixed groups for GRPO, one row per rollout, and counts of mixed, all-pass and all-fail groups."""
    pool = train_pool(
        rollouts, grades, heldout_situation_ids=heldout_situation_ids, heldout_openings=heldout_openings,
        key=pool_key,
    )
    rows = pool.rows.copy()
    rows["passed"] = rows["reward"] == defaults.PASS_REWARD
    groups = rows.groupby(_GROUP_KEYS, sort=True).agg(
        group_size=("rollout_id", "size"),
        passes=("passed", "sum"),
        tool_condition=("tool_condition", "first"),
    ).reset_index()
    train_sizes = pool.train_group_sizes.rename("train_size").reset_index()
    groups = groups.merge(train_sizes, on=PROMPT_KEYS, how="left")
    groups["group_pass_rate"] = groups["passes"] / groups["group_size"]

    complete = groups["group_size"] == groups["train_size"]
    sized = complete & (groups["group_size"] >= defaults.GRPO_MIN_GROUP)
    mixed = sized & (groups["passes"] > 0) & (groups["passes"] < groups["group_size"])
    band = (defaults.GRPO_PASS_RATE_MIN, defaults.GRPO_PASS_RATE_MAX)
    in_band = mixed & groups["group_pass_rate"].between(*band)
    metadata = {
        "groups": len(groups),
        "incomplete": int((~complete).sum()),
        "too_small": int((complete & ~sized).sum()),
        "mixed": int(mixed.sum()),
        "all_pass": int((sized & (groups["passes"] == groups["group_size"])).sum()),
        "all_fail": int((sized & (groups["passes"] == 0)).sum()),
        "in_band": int(in_band.sum()),
        "removed": pool.removed,
    }

    kept = _round_robin(groups[in_band].copy())
    kept["group_id"] = [
        f"{v}/{s}/{sid}/p{p}"
        for v, s, sid, p in kept[PROMPT_KEYS].itertuples(index=False, name=None)
    ]
    out = rows.drop(columns=["tool_condition"]).merge(
        kept[_GROUP_KEYS + ["group_id", "group_size", "group_pass_rate", "tool_condition", "order"]],
        on=_GROUP_KEYS,
        how="inner",
    )
    out = out.sort_values(["order", "rollout_id"]).reset_index(drop=True).reindex(columns=GRPO_COLUMNS)
    metadata["rows"] = len(out)
    return out, metadata


def _round_robin(groups: pd.DataFrame) -> pd.DataFrame:
    """Order groups by round, then tool_condition: one group of each fault kind per round."""
    groups = groups.sort_values(["tool_condition", *_GROUP_KEYS])
    groups["round"] = groups.groupby("tool_condition", sort=False).cumcount()
    groups = groups.sort_values(["round", "tool_condition", *_GROUP_KEYS]).reset_index(drop=True)
    groups["order"] = range(len(groups))
    return groups
