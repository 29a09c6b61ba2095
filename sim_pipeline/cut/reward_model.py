"""Reward-model cut: every graded train row pointwise, and every pair of one prompt whose rewards differ pairwise.

Pointwise rows train a regression or classification head on the reward; pairwise rows train a
Bradley-Terry head (Bradley and Terry 1952), using every comparison of a prompt rather than one per
chosen row, as InstructGPT did with its K-choose-2 comparisons (Ouyang et al. 2022). A pair's `margin` is the
graded reward difference (1.0 pass over fail, 0.5 where one side earned half credit), which TRL's RewardTrainer
adds to its loss.
"""

from collections.abc import Hashable, Iterable

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.cut.pool import PROMPT_KEYS, train_pool
from sim_pipeline.cut.preference import attach_messages, candidate_pairs

POINTWISE_COLUMNS = [
    "situation_id", "seed", "policy_version", "phrasing_index", "rollout_id", "prompt", "completion",
    "reward", "conduct_rule", "judge_version", "sampling", "backends",
]
PAIRWISE_COLUMNS = [
    "situation_id", "seed", "policy_version", "phrasing_index", "chosen_rollout_id", "rejected_rollout_id",
    "prompt", "chosen", "rejected", "chosen_reward", "rejected_reward", "margin", "judge_version", "backends",
]


def reward_model_set(
    rollouts: pd.DataFrame,
    grades: pd.DataFrame,
    *,
    margin: float = defaults.RM_MARGIN,
    heldout_situation_ids: Iterable[str] = (),
    heldout_openings: Iterable[str] = (),
    pool_key: Hashable | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Pointwise rows (one per graded train rollout) and pairwise rows (rewards differing by >= margin)."""
    rows = train_pool(
        rollouts, grades, heldout_situation_ids=heldout_situation_ids, heldout_openings=heldout_openings,
        key=pool_key,
    ).rows
    pointwise = rows.reindex(columns=POINTWISE_COLUMNS).sort_values(PROMPT_KEYS + ["rollout_id"])
    pairs = attach_messages(candidate_pairs(rows, margin=margin), rows)
    return pointwise.reset_index(drop=True), pairs.reindex(columns=PAIRWISE_COLUMNS)
