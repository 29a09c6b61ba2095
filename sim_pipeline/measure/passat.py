"""pass@1, pass@k and pass^k per task and over tasks, with bootstrap intervals over tasks."""

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from sim_pipeline.defaults import BOOTSTRAP_RESAMPLES, CI_LEVEL, PASS_CURVE_RESAMPLES, PASS_REWARD
from sim_pipeline.errors import StatisticsError
from sim_pipeline.measure.stats import bootstrap_ci

SCORE_COLUMNS: tuple[str, ...] = ("metric", "value", "ci_low", "ci_high", "n_tasks", "n_rollouts")
CURVE_COLUMNS: tuple[str, ...] = ("k", "metric", "value", "ci_low", "ci_high", "n_tasks")


def pass_at_k(n: ArrayLike, c: ArrayLike, k: ArrayLike) -> float | np.ndarray:
    """Unbiased pass@k = 1 - C(n-c, k) / C(n, k) per task (Chen et al. 2021); NaN where n < k.

    Uses the product form 1 - prod_{i=n-c+1}^{n} (1 - k/i), summed in log space so large n cannot overflow.
    """
    n_arr, c_arr, k_arr, shape = _counts(n, c, k)
    out = np.full(n_arr.shape, np.nan)
    for kk in np.unique(k_arr):
        sel = k_arr == kk
        i = np.arange(1, int(n_arr[sel].max(initial=0)) + 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(i > kk, np.log1p(-kk / i), 0.0)
        prefix = np.concatenate([[0.0], np.cumsum(terms)])
        ns, cs = n_arr[sel], c_arr[sel]
        # With fewer than k failures every k-subset holds a pass: pass@k = 1 (the product has a zero term).
        value = np.where(ns - cs < kk, 1.0, 0.0 - np.expm1(prefix[ns] - prefix[np.maximum(ns - cs, 0)]))
        out[sel] = np.where(ns < kk, np.nan, value)
    return _shape_like(out, shape)


def pass_hat_k(n: ArrayLike, c: ArrayLike, k: ArrayLike) -> float | np.ndarray:
    """pass^k = C(c, k) / C(n, k): chance that k samples drawn without replacement all pass (Yao et al. 2024).

    This is tau-bench's reliability estimator; NaN where n < k.
    """
    n_arr, c_arr, k_arr, shape = _counts(n, c, k)
    steps = np.arange(int(k_arr.max(initial=1)))
    # C(c,k)/C(n,k) = prod_{i<k} (c-i)/(n-i); terms past each task's own k are 1. Tasks with n < k divide by
    # zero here and are masked to NaN below.
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(steps < k_arr[:, None], (c_arr[:, None] - steps) / (n_arr[:, None] - steps), 1.0)
        value = np.where(c_arr < k_arr, 0.0, np.prod(ratios, axis=1))
    return _shape_like(np.where(n_arr < k_arr, np.nan, value), shape)


def task_counts(grades: pd.DataFrame) -> pd.DataFrame:
    """One row per task (situation_id) with n rollouts and c passes (reward >= PASS_REWARD)."""
    _require(grades, ("situation_id", "reward"))
    passed = (grades["reward"].to_numpy(dtype=float) >= PASS_REWARD).astype(int)
    counts = (
        pd.DataFrame({"situation_id": grades["situation_id"].to_numpy(), "c": passed})
        .groupby("situation_id", sort=True)["c"]
        .agg(n="size", c="sum")
        .reset_index()
    )
    return counts.astype({"n": int, "c": int})


def metric_names(k: int) -> tuple[str, ...]:
    """The metric labels for a given k: pass@1, then pass^k and pass@k unless k == 1 (they equal pass@1)."""
    _check_k(k)
    return ("pass@1",) if k == 1 else ("pass@1", f"pass^{k}", f"pass@{k}")


def task_scores(counts: pd.DataFrame, *, k: int) -> pd.DataFrame:
    """Per-task estimators (columns named by `metric_names(k)`) next to situation_id, n and c; NaN where n < k."""
    _check_k(k)
    n, c = counts["n"].to_numpy(), counts["c"].to_numpy()
    out = counts.loc[:, ["situation_id", "n", "c"]].copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        out["pass@1"] = np.where(n > 0, c / np.maximum(n, 1), np.nan)
    if k > 1:
        out[f"pass^{k}"] = pass_hat_k(n, c, k)
        out[f"pass@{k}"] = pass_at_k(n, c, k)
    return out


def default_k(counts: pd.DataFrame) -> int:
    """The number of samples most tasks have (1 when there are none).

    Not the smallest: one errored sample would otherwise turn pass^4 into pass^3 for every task; a task with fewer
    graded samples leaves pass^k and pass@k only.
    """
    return int(counts["n"].mode().max()) if len(counts) else 1


def score_table(
    grades: pd.DataFrame,
    *,
    k: int | None = None,
    seed: int = 0,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = CI_LEVEL,
) -> pd.DataFrame:
    """pass@1, pass^k and pass@k over tasks with percentile bootstrap intervals resampling tasks.

    Estimators: Chen et al. 2021 (pass@k), Yao et al. 2024 (pass^k); tasks with fewer than k rollouts are
    left out of pass^k and pass@k, which `n_tasks` and `n_rollouts` show.
    """
    counts = task_counts(grades)
    k = default_k(counts) if k is None else k
    per_task = task_scores(counts, k=k)
    rows = []
    for metric in metric_names(k):
        usable = per_task[metric].notna().to_numpy()
        interval = bootstrap_ci(per_task.loc[usable, metric], n_resamples=n_resamples, level=level, seed=seed)
        rows.append(
            {
                "metric": metric,
                "value": interval.estimate,
                "ci_low": interval.low,
                "ci_high": interval.high,
                "n_tasks": int(usable.sum()),
                "n_rollouts": int(per_task.loc[usable, "n"].sum()),
            }
        )
    return pd.DataFrame(rows, columns=list(SCORE_COLUMNS))


NOOP_FLOOR = "no-op floor"


def noop_floor_row(noop_pass: pd.Series, *, seed: int = 0, n_resamples: int = BOOTSTRAP_RESAMPLES,
                   level: float = CI_LEVEL) -> dict[str, object]:
    """The score-table row of the no-op floor: the share of tasks an agent that never calls a tool passes.

    `noop_pass` holds one bool per held-out task (the situations table's `noop_pass`, decided by the state oracle);
    the interval bootstraps tasks like pass@1's, so the two compare on the same footing.
    """
    values = noop_pass.astype(float)
    interval = bootstrap_ci(values, n_resamples=n_resamples, level=level, seed=seed)
    return {"metric": NOOP_FLOOR, "value": interval.estimate, "ci_low": interval.low, "ci_high": interval.high,
            "n_tasks": len(values), "n_rollouts": 0}


def pass_curve(
    grades: pd.DataFrame,
    *,
    k_max: int | None = None,
    seed: int = 0,
    n_resamples: int = PASS_CURVE_RESAMPLES,
    level: float = CI_LEVEL,
) -> pd.DataFrame:
    """pass@k and pass^k for k = 1..k_max over tasks, with percentile bootstrap intervals resampling tasks.

    Chen et al. 2021 (pass@k) and Yao et al. 2024 (pass^k); `k_max` defaults to the fewest samples any task
    has, so every point averages the same tasks. Rows are labelled `pass@k` / `pass^k` with k in its column.
    """
    counts = task_counts(grades)
    k_max = default_k(counts) if k_max is None else k_max
    _check_k(k_max)
    n, c = counts["n"].to_numpy(), counts["c"].to_numpy()
    rows = []
    for k in range(1, k_max + 1):
        for metric, estimator in (("pass@k", pass_at_k), ("pass^k", pass_hat_k)):
            per_task = np.asarray(estimator(n, c, k), dtype=float)
            interval = bootstrap_ci(per_task, n_resamples=n_resamples, level=level, seed=seed)
            rows.append({"k": k, "metric": metric, "value": interval.estimate, "ci_low": interval.low,
                         "ci_high": interval.high, "n_tasks": interval.n})
    return pd.DataFrame(rows, columns=list(CURVE_COLUMNS))


def _counts(
    n: ArrayLike, c: ArrayLike, k: ArrayLike
) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, ...]]:
    """Validated, broadcast, flattened integer arrays of n, c and k, and their broadcast shape."""
    n_arr, c_arr, k_arr = (np.asarray(x) for x in (n, c, k))
    for name, arr in (("n", n_arr), ("c", c_arr), ("k", k_arr)):
        if arr.size and not np.all(np.equal(np.mod(arr, 1), 0)):
            raise StatisticsError(f"{name}={arr!r} must hold whole numbers (counts of rollouts).")
    shape = np.broadcast_shapes(n_arr.shape, c_arr.shape, k_arr.shape)
    n_arr, c_arr, k_arr = (a.astype(np.int64).ravel() for a in np.broadcast_arrays(n_arr, c_arr, k_arr))
    if np.any(c_arr < 0) or np.any(c_arr > n_arr):
        raise StatisticsError(f"c={c!r} must lie in [0, n] for n={n!r}: c counts passes among n rollouts.")
    if np.any(k_arr < 1):
        raise StatisticsError(f"k={k!r} must be at least 1: pass@k draws k rollouts per task.")
    return n_arr, c_arr, k_arr, shape


def _shape_like(flat: np.ndarray, shape: tuple[int, ...]) -> float | np.ndarray:
    """A float for scalar inputs, else the array in the broadcast input shape."""
    return float(flat[0]) if shape == () else flat.reshape(shape)


def _check_k(k: int) -> None:
    """Reject k < 1."""
    if int(k) != k or k < 1:
        raise StatisticsError(f"k={k!r} must be a whole number >= 1: pass@k draws k rollouts per task.")


def _require(grades: pd.DataFrame, columns: tuple[str, ...]) -> None:
    """Raise when the grades table lacks a needed column."""
    missing = [col for col in columns if col not in grades.columns]
    if missing:
        raise StatisticsError(f"grades table lacks column(s) {missing}; pass the grades asset's table.")
