"""Preference cut: chosen/rejected pairs of one prompt for DPO, matched on length.

DPO (Rafailov et al. 2023) learns whatever separates chosen from rejected; when chosen is usually the
longer reply it learns length (Park et al. 2024). So each chosen row is paired with the eligible
rejected row closest in length, length being the characters the assistant wrote in the completion
(reply text plus tool-call names and arguments), and the metadata warns when chosen is still longer
in most pairs.
"""

from collections.abc import Hashable, Iterable

import numpy as np
import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.cut.pool import PROMPT_KEYS, train_pool
from sim_pipeline.errors import CutError

PAIR_COLUMNS = [
    "situation_id", "seed", "policy_version", "phrasing_index", "chosen_rollout_id", "rejected_rollout_id",
    "prompt", "chosen", "rejected", "chosen_reward", "rejected_reward", "margin", "length_delta",
    "judge_version", "sampling", "backends",
]
# Rows are compared only when they saw the same prompt text and were graded by the same judge.
_PAIR_KEYS = PROMPT_KEYS + ["prompt_key", "judge_version"]
_SIDE_COLUMNS = ["rollout_id", "reward", "assistant_chars"]


def candidate_pairs(rows: pd.DataFrame, *, margin: float) -> pd.DataFrame:
    """Every (chosen, rejected) pair of pool rows of one prompt whose rewards differ by at least margin."""
    if not 0 < margin <= defaults.PASS_REWARD:
        raise CutError(
            f"margin must lie in (0, {defaults.PASS_REWARD}], got {margin}: "
            f"use 1.0, or 0.5 to admit partial credit"
        )
    sides = rows[_PAIR_KEYS + _SIDE_COLUMNS]
    pairs = sides.merge(sides, on=_PAIR_KEYS, suffixes=("_chosen", "_rejected"))
    pairs = pairs[pairs["reward_chosen"] - pairs["reward_rejected"] >= margin]
    pairs = pairs.rename(columns={
        "rollout_id_chosen": "chosen_rollout_id", "rollout_id_rejected": "rejected_rollout_id",
        "reward_chosen": "chosen_reward", "reward_rejected": "rejected_reward",
    })
    pairs["margin"] = pairs["chosen_reward"] - pairs["rejected_reward"]
    pairs["length_delta"] = pairs["assistant_chars_chosen"] - pairs["assistant_chars_rejected"]
    return pairs.reset_index(drop=True)


def attach_messages(pairs: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """Add the shared prompt and each side's completion to pairs, sorted by prompt and rollout ids."""
    by_id = rows.set_index("rollout_id")
    pairs = pairs.sort_values(PROMPT_KEYS + ["chosen_rollout_id", "rejected_rollout_id"])
    pairs = pairs.reset_index(drop=True)
    chosen_ids, rejected_ids = pairs["chosen_rollout_id"], pairs["rejected_rollout_id"]
    for column, source, ids in (
        ("prompt", "prompt", chosen_ids),
        ("chosen", "completion", chosen_ids),
        ("rejected", "completion", rejected_ids),
        ("sampling", "sampling", chosen_ids),  # the chosen side's settings; both share all but the seed
        ("backends", "backends", chosen_ids),  # the chosen side's backends (one partition: one config each)
    ):
        if source in by_id.columns:  # a pool from tables without provenance has no backends
            pairs[column] = pd.Series(by_id.loc[ids, source].to_list(), index=pairs.index, dtype=object)
    return pairs


def build_preference_pairs(
    rollouts: pd.DataFrame,
    grades: pd.DataFrame,
    *,
    margin: float = defaults.DPO_MARGIN,
    heldout_situation_ids: Iterable[str] = (),
    heldout_openings: Iterable[str] = (),
    pool_key: Hashable | None = None,
) -> tuple[pd.DataFrame, dict]:
    """DPO pairs (one per chosen row, its closest-length rejected row) and metadata with a length warning."""
    pool = train_pool(
        rollouts, grades, heldout_situation_ids=heldout_situation_ids, heldout_openings=heldout_openings,
        key=pool_key,
    )
    pairs = candidate_pairs(pool.rows, margin=margin)
    pairs["abs_length_delta"] = pairs["length_delta"].abs()
    # Closest length first; on a tie, the wider margin, then the smaller rollout_id, for determinism.
    order = ["chosen_rollout_id", "abs_length_delta", "rejected_reward", "rejected_rollout_id"]
    pairs = pairs.sort_values(order)
    pairs = pairs.drop_duplicates("chosen_rollout_id", keep="first")
    pairs = attach_messages(pairs, pool.rows).reindex(columns=PAIR_COLUMNS)
    return pairs, _metadata(pairs, margin=margin, removed=pool.removed)


def _metadata(pairs: pd.DataFrame, *, margin: float, removed: dict[str, int]) -> dict:
    n_pairs = len(pairs)
    chosen_longer = float(np.mean(pairs["length_delta"] > 0)) if n_pairs else None
    warning = None
    if n_pairs >= defaults.DPO_LENGTH_BIAS_MIN_PAIRS and chosen_longer >= defaults.DPO_LENGTH_BIAS_SHARE:
        warning = (
            f"chosen is longer than rejected in {chosen_longer:.0%} of {n_pairs} pairs, so DPO may learn "
            f"length: roll out more samples per prompt so closer-length rejected rows exist"
        )
    return {
        "pairs": n_pairs,
        "prompts": int(pairs.groupby(PROMPT_KEYS).ngroups) if n_pairs else 0,
        "margin": margin,
        "chosen_longer_share": chosen_longer,
        "length_bias_warning": warning,
        "removed": removed,
    }
