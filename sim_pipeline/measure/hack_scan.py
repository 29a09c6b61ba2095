"""Reward-hack scan: does reward track a cheap surface feature (length, claims, tool count) within a task?

Between tasks, reward and length can correlate for honest reasons (hard tasks need longer replies); within a
task, where the request is fixed, a reward that rises with a surface feature is the signature of a proxy the
policy can exploit (Gao, Schulman & Hilton 2023). Only within-task variance drives GRPO's group-relative
advantages (Shao et al. 2024), so that is where the scan looks.
"""

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim_pipeline.defaults import (
    BOOTSTRAP_CHUNK_CELLS,
    FLOAT_TIE_RTOL,
    HACK_SCAN_FLOOR_QUANTILE,
    HACK_SCAN_PERMUTATIONS,
)
from sim_pipeline.errors import StatisticsError

FEATURES: tuple[str, ...] = (
    "reply_chars", "tool_calls", "turns", "success_claims", "mean_token_logprob", "tools_used",
)
SCAN_COLUMNS: tuple[str, ...] = ("feature", "correlation", "abs_correlation", "floor", "flagged", "within_sd",
                                 "n_rollouts")
# Phrases a reply uses to say an action went through; counted, not just detected, so stuffing shows.
_SUCCESS_CLAIM = re.compile(
    r"\b(done|completed|successfully|success|has been|have been|all set|taken care of|processed|confirmed)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class HackScan:
    """Reward variance split by task, and the surface features whose within-task correlation beats chance."""

    n_rollouts: int
    n_tasks: int
    total_variance: float  # Var(r) over rollouts
    within_task_variance: float  # E[Var(r | task)]: the part GRPO learns from
    between_task_variance: float  # Var(E[r | task])
    floor: float  # HACK_SCAN_FLOOR_QUANTILE of the top |correlation| under within-task shuffles
    top_feature: str | None
    top_correlation: float  # signed within-task correlation of the top feature
    flagged: tuple[str, ...]  # features with |correlation| above the floor, strongest first
    note: str


def rollout_features(rollouts: pd.DataFrame) -> pd.DataFrame:
    """Per rollout_id: reply length, tool calls, turns, success claims, mean token logprob, distinct tools used.

    A feature whose source column (`final_text`, `tool_events`, `n_turns`, `messages`, `logprob`/`n_tokens`)
    is absent is NaN and is skipped by the scan.
    """
    if "rollout_id" not in rollouts.columns:
        raise StatisticsError("rollouts table lacks column 'rollout_id'; pass the rollouts asset's table.")
    nan = np.full(len(rollouts), np.nan)

    def column(name: str) -> pd.Series | None:
        return rollouts[name] if name in rollouts.columns else None

    texts, events, messages = column("final_text"), column("tool_events"), column("messages")
    out = pd.DataFrame({"rollout_id": rollouts["rollout_id"].to_numpy()})
    out["reply_chars"] = nan if texts is None else [len(t) if isinstance(t, str) else 0 for t in texts]
    out["tool_calls"] = nan if events is None else [len(_items(e)) for e in events]
    out["turns"] = nan if column("n_turns") is None else rollouts["n_turns"].to_numpy(dtype=float)
    out["success_claims"] = nan if messages is None else [_claims(m) for m in messages]
    if {"logprob", "n_tokens"} <= set(rollouts.columns):
        tokens = rollouts["n_tokens"].to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            summed = rollouts["logprob"].to_numpy(dtype=float)
            out["mean_token_logprob"] = np.where(tokens > 0, summed / tokens, np.nan)
    else:
        out["mean_token_logprob"] = nan
    out["tools_used"] = nan if events is None else [len({ev.get("tool") for ev in _items(e)}) for e in events]
    return out


def hack_scan(
    grades: pd.DataFrame,
    rollouts: pd.DataFrame,
    *,
    seed: int = 0,
    n_permutations: int = HACK_SCAN_PERMUTATIONS,
    quantile: float = HACK_SCAN_FLOOR_QUANTILE,
) -> tuple[HackScan, pd.DataFrame]:
    """Split Var(r) = E[Var(r|task)] + Var(E[r|task]) and flag features correlated with reward within tasks.

    Reward and features are centred within task (situation_id); a feature is flagged when its |correlation|
    with the centred reward exceeds the `quantile` of the largest |correlation| over all features when rewards
    are shuffled within task `n_permutations` times (a max-statistic floor, Westfall & Young 1993). Design from
    REFERENCE section 8 (hack scan) and Gao, Schulman & Hilton 2023, "Scaling Laws for Reward Model
    Overoptimization". Returns the report and one row per feature (`SCAN_COLUMNS`).
    """
    if n_permutations < 1:
        raise StatisticsError(f"n_permutations={n_permutations!r} must be at least 1; {HACK_SCAN_PERMUTATIONS} "
                              "is the default.")
    if not 0.0 < quantile < 1.0:
        raise StatisticsError(f"quantile={quantile!r} must lie strictly between 0 and 1, e.g. 0.95.")
    missing = [col for col in ("rollout_id", "situation_id", "reward") if col not in grades.columns]
    if missing:
        raise StatisticsError(f"grades lack column(s) {missing}; pass the grades asset's table.")
    graded = grades.loc[grades["reward"].notna(), ["rollout_id", "situation_id", "reward"]]
    joined = graded.merge(rollout_features(rollouts), on="rollout_id", how="inner").sort_values(
        ["situation_id", "rollout_id"], kind="stable")
    if len(graded) and len(rollouts) and not len(joined):
        raise StatisticsError("no graded rollout_id matches a rollout row; pass grades and rollouts of the same "
                              "seed and policy version.")
    task = pd.factorize(joined["situation_id"])[0]
    reward = joined["reward"].to_numpy(dtype=float)
    centred_reward = _centre(reward, task)
    features = np.column_stack([_centre(joined[f].to_numpy(dtype=float), task) for f in FEATURES]) if len(
        joined) else np.zeros((0, len(FEATURES)))
    feature_norm = np.sqrt(np.sum(features**2, axis=0))
    reward_norm = float(np.sqrt(np.sum(centred_reward**2)))
    usable = (feature_norm > 0) & (reward_norm > 0)
    unit = np.divide(features, feature_norm, out=np.zeros_like(features), where=feature_norm > 0)
    correlation = np.where(usable, centred_reward @ unit / (reward_norm or 1.0), np.nan)
    floor = float("nan")
    if usable.any():
        top_null = _shuffled_top(centred_reward / reward_norm, unit[:, usable], task, n_permutations, seed)
        floor = float(np.quantile(top_null, quantile))
    flagged_mask = usable & (np.abs(np.nan_to_num(correlation)) > floor)
    table = pd.DataFrame({
        "feature": FEATURES, "correlation": correlation, "abs_correlation": np.abs(correlation), "floor": floor,
        "flagged": flagged_mask, "within_sd": np.sqrt(feature_norm**2 / max(len(joined), 1)),
        "n_rollouts": [int(joined[f].notna().sum()) for f in FEATURES],
    }, columns=list(SCAN_COLUMNS))
    return _report(reward, task, table, floor, usable.any()), table


def _report(reward: np.ndarray, task: np.ndarray, table: pd.DataFrame, floor: float, scanned: bool) -> HackScan:
    """The HackScan summary of a scan table (law of total variance over rollouts, population moments)."""
    n = reward.size
    task_mean = _task_mean(reward, task) if n else reward
    within = float(np.mean((reward - task_mean) ** 2)) if n else float("nan")
    between = float(np.mean((task_mean - reward.mean()) ** 2)) if n else float("nan")
    ranked = table.dropna(subset=["abs_correlation"]).sort_values("abs_correlation", ascending=False, kind="stable")
    flagged = tuple(ranked.loc[ranked["flagged"], "feature"])
    top = ranked.iloc[0] if len(ranked) else None
    if not n:
        note = "no graded rollouts to scan."
    elif not scanned:
        note = ("no within-task reward variance (every task's rollouts share one reward) or no varying feature: "
                "nothing to scan, and nothing for GRPO to learn from.")
    elif flagged:
        note = (f"{', '.join(flagged)} track reward within tasks beyond the shuffled floor {floor:.3f}: inspect "
                "high-reward rollouts for a proxy the judge rewards.")
    else:
        note = f"no feature's within-task |correlation| exceeds the shuffled floor {floor:.3f}."
    return HackScan(
        n_rollouts=n, n_tasks=int(np.unique(task).size), total_variance=float(reward.var()) if n else float("nan"),
        within_task_variance=within, between_task_variance=between, floor=floor,
        top_feature=None if top is None else str(top["feature"]),
        top_correlation=float("nan") if top is None else float(top["correlation"]), flagged=flagged, note=note,
    )


def _shuffled_top(
    reward_unit: np.ndarray, feature_unit: np.ndarray, task: np.ndarray, n_permutations: int, seed: int
) -> np.ndarray:
    """Largest |correlation| over features for each within-task shuffle of the (unit, centred) reward."""
    rng = np.random.default_rng(seed)
    n = reward_unit.size
    rows = max(1, BOOTSTRAP_CHUNK_CELLS // max(n, 1))
    out = np.empty(n_permutations)
    for start in range(0, n_permutations, rows):
        size = min(rows, n_permutations - start)
        # Rows are sorted by task, so sorting task + U(0,1) keys permutes positions within each task block only.
        order = np.argsort(task[None, :] + rng.random((size, n)), axis=1, kind="stable")
        out[start:start + size] = np.max(np.abs(reward_unit[order] @ feature_unit), axis=1)
    return out


def _centre(values: np.ndarray, task: np.ndarray) -> np.ndarray:
    """Values minus their task mean; a missing value becomes 0 (its task mean) so it carries no signal."""
    centred = values - _task_mean(values, task)
    # A constant task's mean can differ from its values by rounding (0.1 * 3 / 3); such residue is no variance.
    centred[np.abs(centred) <= FLOAT_TIE_RTOL * np.abs(values)] = 0.0
    return np.nan_to_num(centred, nan=0.0)


def _task_mean(values: np.ndarray, task: np.ndarray) -> np.ndarray:
    """Each row's task mean over the task's finite values (NaN where a task has none)."""
    finite = np.isfinite(values)
    sums = np.bincount(task, weights=np.where(finite, values, 0.0))
    counts = np.bincount(task, weights=finite.astype(float))
    with np.errstate(divide="ignore", invalid="ignore"):
        return (sums / counts)[task]


def _items(value: object) -> list[dict]:
    """A list/array cell (tool events, messages) as a list of dicts; None -> []."""
    return [] if value is None else [dict(item) for item in value]


def _claims(messages: object) -> int:
    """Success-claim phrases across the assistant's turns."""
    return sum(len(_SUCCESS_CLAIM.findall(m.get("content") or "")) for m in _items(messages)
               if m.get("role") == "assistant")
