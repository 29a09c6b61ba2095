"""How far the policy drifted from a reference model: mean per-token log-ratio on the policy's own samples."""

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim_pipeline.errors import StatisticsError

_TOKEN_COLUMNS = ("token_logprobs", "reference_token_logprobs")
_SUMMED_COLUMNS = ("logprob", "reference_logprob", "n_tokens")


@dataclass(frozen=True)
class ReferenceKL:
    """Per-token KL(policy || reference) estimate over the tokens of rollouts sampled from the policy."""

    mean_per_token: float  # sum over tokens of (log p_policy - log p_reference) / number of tokens
    mean_per_rollout: float  # the same log-ratio summed per rollout, averaged over rollouts
    n_tokens: int
    n_rollouts: int
    source: str  # "token_logprobs" (per-token lists) or "summed" (logprob sums and n_tokens)


def reference_kl(rows: pd.DataFrame) -> ReferenceKL:
    """Mean per-token (policy logprob - reference logprob) on the same sampled tokens.

    On samples from the policy this is the standard Monte Carlo estimator of KL(policy || reference), the
    quantity RLHF penalizes (Stiennon et al. 2020; Ouyang et al. 2022; the k1 estimator of Schulman 2020,
    "Approximating KL Divergence"); REFERENCE section 8. Uses per-token lists (`token_logprobs`,
    `reference_token_logprobs`) when present, else summed `logprob`, `reference_logprob` and `n_tokens`.
    Rows with no tokens or missing values are skipped; no usable row gives NaN.
    """
    if set(_TOKEN_COLUMNS) <= set(rows.columns):
        diffs, tokens = _from_token_lists(rows)
        source = "token_logprobs"
    elif set(_SUMMED_COLUMNS) <= set(rows.columns):
        diffs, tokens = _from_sums(rows)
        source = "summed"
    else:
        raise StatisticsError(
            f"rows carry no reference logprobs: need columns {list(_TOKEN_COLUMNS)} (per-token lists of equal "
            f"length) or {list(_SUMMED_COLUMNS)}; found {sorted(rows.columns)}. Score the policy's rollouts "
            "under the reference model first and add its log-probabilities.")
    usable = np.isfinite(diffs) & (tokens > 0)
    total_tokens = int(tokens[usable].sum())
    nan = float("nan")
    return ReferenceKL(
        mean_per_token=float(diffs[usable].sum() / total_tokens) if total_tokens else nan,
        mean_per_rollout=float(diffs[usable].mean()) if usable.any() else nan,
        n_tokens=total_tokens,
        n_rollouts=int(usable.sum()),
        source=source,
    )


def _from_token_lists(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per-rollout summed log-ratio and token count from the per-token lists."""
    diffs = np.full(len(rows), np.nan)
    tokens = np.zeros(len(rows), dtype=np.int64)
    ids = rows["rollout_id"].to_numpy() if "rollout_id" in rows.columns else np.arange(len(rows))
    pairs = zip(rows["token_logprobs"], rows["reference_token_logprobs"], strict=True)
    for i, (policy, reference) in enumerate(pairs):
        if policy is None or reference is None:
            continue
        policy_arr, reference_arr = np.asarray(policy, dtype=float), np.asarray(reference, dtype=float)
        if policy_arr.shape != reference_arr.shape:
            raise StatisticsError(
                f"rollout {ids[i]!r} has {policy_arr.size} policy token logprobs but {reference_arr.size} "
                "reference ones; score exactly the sampled tokens under the reference model.")
        diffs[i] = float(np.sum(policy_arr - reference_arr))
        tokens[i] = policy_arr.size
    return diffs, tokens


def _from_sums(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per-rollout summed log-ratio and token count from the summed columns."""
    tokens = rows["n_tokens"].to_numpy(dtype=float)
    diffs = rows["logprob"].to_numpy(dtype=float) - rows["reference_logprob"].to_numpy(dtype=float)
    return diffs, np.nan_to_num(tokens, nan=0.0).astype(np.int64)
