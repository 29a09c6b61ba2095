"""Candidate vs baseline on shared held-out tasks: paired bootstrap interval, sign-flip p, and a verdict."""

import math

import numpy as np
import pandas as pd
from scipy import special

from sim_pipeline.defaults import (
    BOOTSTRAP_RESAMPLES,
    CI_LEVEL,
    DELTA_ALPHA,
    DELTA_EQUIVALENCE_MARGIN,
    DELTA_MARKER_DIRECTIONS,
    DELTA_MIN_SHARED_SHARE,
    DELTA_MIN_SHARED_TASKS,
    DELTA_POWER,
)
from sim_pipeline.errors import StatisticsError
from sim_pipeline.measure.passat import metric_names, task_counts, task_scores
from sim_pipeline.measure.stats import paired_bootstrap_ci, sign_flip_test

DELTA_COLUMNS: tuple[str, ...] = (
    "metric", "baseline", "candidate", "n_tasks", "before", "after", "delta",
    "ci_low", "ci_high", "p_value", "verdict", "reason",
)
PASS, FAIL, NO_DIFFERENCE, INCONCLUSIVE = "PASS", "FAIL", "NO DIFFERENCE", "INCONCLUSIVE"
NOT_COMPARABLE, INSUFFICIENT_DATA = "NOT COMPARABLE", "INSUFFICIENT DATA"
_DIRECTIONS = {"higher_is_better": 1.0, "lower_is_better": -1.0}
_MARKER_PREFIX = "marker_"


def delta_report(
    baseline: pd.DataFrame,
    candidate: pd.DataFrame,
    *,
    baseline_version: str,
    candidate_version: str,
    k: int | None = None,
    markers: dict[str, str] | None = None,
    must_not_regress: tuple[str, ...] = (),
    seed: int = 0,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
) -> pd.DataFrame:
    """Paired per-task deltas (candidate - baseline) of pass@1, pass^k, pass@k and markers on held-out tasks.

    Tasks pair by situation_id; intervals are paired percentile bootstraps over tasks (Efron & Tibshirani
    1993), p-values two-sided sign-flip permutation tests (Fisher 1935); pass@k per Chen et al. 2021,
    pass^k per Yao et al. 2024. `markers` maps marker name -> 'higher_is_better' | 'lower_is_better'
    (default: `DELTA_MARKER_DIRECTIONS` for marker columns present); `must_not_regress` names metrics
    whose FAIL fails the run (see `must_not_regress_failures`).
    """
    markers = _resolve_markers(markers, baseline, candidate)
    before_rows = _heldout(baseline, baseline_version, "baseline")
    after_rows = _heldout(candidate, candidate_version, "candidate")
    before_counts, after_counts = task_counts(before_rows), task_counts(after_rows)
    shared = np.intersect1d(before_counts["situation_id"].to_numpy(), after_counts["situation_id"].to_numpy())
    if k is None:
        both = pd.concat([before_counts, after_counts])
        k = int(both.loc[both["situation_id"].isin(shared), "n"].min()) if shared.size else 1
    before = _per_task(before_rows, before_counts, k, markers).reindex(shared)
    after = _per_task(after_rows, after_counts, k, markers).reindex(shared)
    metrics = {name: 1.0 for name in metric_names(k)} | {
        _MARKER_PREFIX + name: _DIRECTIONS[direction] for name, direction in markers.items()
    }
    guarded = {_resolve_guarded(name, tuple(metrics)) for name in must_not_regress}
    blocked = _comparability(before_rows, after_rows, len(before_counts), len(after_counts), shared.size)
    rows = []
    for metric, sign in metrics.items():
        row = {"metric": metric, "baseline": baseline_version, "candidate": candidate_version}
        row |= _compare(before[metric].to_numpy(float), after[metric].to_numpy(float), sign, blocked,
                        seed=seed, n_resamples=n_resamples)
        if metric in guarded:
            row["reason"] = f"must not regress; {row['reason']}"
        rows.append(row)
    return pd.DataFrame(rows, columns=list(DELTA_COLUMNS))


def must_not_regress_failures(report: pd.DataFrame, must_not_regress: tuple[str, ...]) -> tuple[str, ...]:
    """The must-not-regress metrics of a `delta_report` table whose verdict is FAIL (they fail the run)."""
    guarded = {_resolve_guarded(name, tuple(report["metric"])) for name in must_not_regress}
    failed = report.loc[report["metric"].isin(guarded) & (report["verdict"] == FAIL), "metric"]
    return tuple(failed)


def holdout_size(
    effect: float, *, sd: float, alpha: float = DELTA_ALPHA, power: float = DELTA_POWER
) -> int:
    """Paired held-out tasks needed to detect a mean per-task difference `effect` with the given power.

    Normal approximation for a two-sided one-sample (paired) test, n = ((z_{1-alpha/2} + z_power) sd / effect)^2
    (Chow, Shao & Wang 2008, Sample Size Calculations in Clinical Research, sec. 3.1), raised to the smallest n
    at which an exact sign-flip test can reach p < alpha at all (2^(1-n) < alpha).
    """
    if not math.isfinite(effect) or effect == 0:
        raise StatisticsError(f"effect={effect!r} must be a finite non-zero difference, e.g. 0.05 of pass@1.")
    if not math.isfinite(sd) or sd < 0:
        raise StatisticsError(f"sd={sd!r} must be a finite standard deviation >= 0 of per-task differences.")
    for name, value in (("alpha", alpha), ("power", power)):
        if not 0.0 < value < 1.0:
            raise StatisticsError(f"{name}={value!r} must lie strictly between 0 and 1.")
    normal = math.ceil(((special.ndtri(1 - alpha / 2) + special.ndtri(power)) * sd / abs(effect)) ** 2)
    exact_floor = math.floor(1 - math.log2(alpha)) + 1
    return max(normal, exact_floor)


def _compare(
    before: np.ndarray, after: np.ndarray, sign: float, blocked: tuple[str, str] | None, *, seed: int,
    n_resamples: int,
) -> dict:
    """The numeric columns, verdict and reason of one metric's paired comparison."""
    usable = np.isfinite(before) & np.isfinite(after)
    diffs = after[usable] - before[usable]
    nan = float("nan")
    row = {"n_tasks": int(usable.sum()), "before": float(before[usable].mean()) if usable.any() else nan,
           "after": float(after[usable].mean()) if usable.any() else nan, "delta": nan, "ci_low": nan,
           "ci_high": nan, "p_value": nan}
    if blocked is not None:
        return row | {"verdict": blocked[0], "reason": blocked[1]}
    if diffs.size < DELTA_MIN_SHARED_TASKS:
        return row | {"verdict": INSUFFICIENT_DATA,
                      "reason": f"only {diffs.size} shared tasks have this metric on both sides; need "
                                f"{DELTA_MIN_SHARED_TASKS} (fewer than k samples, or a marker column missing)."}
    interval = paired_bootstrap_ci(diffs, n_resamples=n_resamples, level=CI_LEVEL, seed=seed)
    p_value = sign_flip_test(diffs, n_resamples=n_resamples, seed=seed)
    row |= {"delta": interval.estimate, "ci_low": interval.low, "ci_high": interval.high, "p_value": p_value}
    return row | _verdict(interval.low, interval.high, sign, p_value)


def _verdict(low: float, high: float, sign: float, p_value: float) -> dict[str, str]:
    """PASS/FAIL when the interval excludes 0; NO DIFFERENCE when it sits inside the equivalence margin."""
    span = f"{CI_LEVEL:.0%} interval [{low:+.3f}, {high:+.3f}], p={p_value:.3g}"
    if sign * low > 0 and sign * high > 0:
        return {"verdict": PASS, "reason": f"{span}: wholly on the better side of 0."}
    if sign * low < 0 and sign * high < 0:
        return {"verdict": FAIL, "reason": f"{span}: wholly on the worse side of 0."}
    if max(abs(low), abs(high)) < DELTA_EQUIVALENCE_MARGIN:
        return {"verdict": NO_DIFFERENCE,
                "reason": f"{span}: contains 0 and lies within +/-{DELTA_EQUIVALENCE_MARGIN} (no meaningful change)."}
    return {"verdict": INCONCLUSIVE,
            "reason": f"{span}: contains 0 but reaches past +/-{DELTA_EQUIVALENCE_MARGIN}; add held-out tasks "
                      f"(see holdout_size)."}


def _comparability(
    before_rows: pd.DataFrame, after_rows: pd.DataFrame, n_before: int, n_after: int, n_shared: int
) -> tuple[str, str] | None:
    """(verdict, reason) when the two sides cannot be compared at all, else None."""
    if n_before == 0 or n_after == 0:
        side = "baseline" if n_before == 0 else "candidate"
        return INSUFFICIENT_DATA, f"the {side} has no held-out rows; roll it out on the held-out split."
    judges_before = set(before_rows["judge_version"].dropna())
    judges_after = set(after_rows["judge_version"].dropna())
    if judges_before != judges_after:
        return NOT_COMPARABLE, (f"judge versions differ ({sorted(judges_before)} vs {sorted(judges_after)}); "
                                "re-grade both sides with the same judge.")
    share = n_shared / max(n_before, n_after)
    if n_shared < DELTA_MIN_SHARED_TASKS or share < DELTA_MIN_SHARED_SHARE:
        return NOT_COMPARABLE, (f"{n_shared} shared held-out tasks of {n_before} (baseline) and {n_after} "
                                f"(candidate); need >= {DELTA_MIN_SHARED_TASKS} and >= "
                                f"{DELTA_MIN_SHARED_SHARE:.0%} of each: run both on the same seeds.")
    return None


def _per_task(rows: pd.DataFrame, counts: pd.DataFrame, k: int, markers: dict[str, str]) -> pd.DataFrame:
    """Per-task estimators and marker means, indexed by situation_id."""
    scores = task_scores(counts, k=k).set_index("situation_id")
    columns = [_MARKER_PREFIX + name for name in markers]
    present = [col for col in columns if col in rows.columns]
    means = rows.groupby("situation_id")[present].mean() if present else pd.DataFrame(index=scores.index)
    return scores.join(means).reindex(columns=[*scores.columns, *columns])


def _heldout(grades: pd.DataFrame, version: str, side: str) -> pd.DataFrame:
    """The held-out rows of one policy version, after checking the table has what the delta needs."""
    missing = [col for col in ("situation_id", "reward", "split", "judge_version") if col not in grades.columns]
    if missing:
        raise StatisticsError(f"{side} grades lack column(s) {missing}; pass the grades asset's table.")
    rows = grades.loc[grades["split"] == "heldout"]
    if "policy_version" in rows.columns and len(rows):
        mine = rows["policy_version"] == version
        if not mine.any():
            found = sorted(rows["policy_version"].dropna().unique())
            raise StatisticsError(f"{side} grades hold policy_version {found}, not {version!r}; pass that "
                                  f"version's grades or fix {side}_version.")
        rows = rows.loc[mine]
    return rows


def _resolve_markers(
    markers: dict[str, str] | None, baseline: pd.DataFrame, candidate: pd.DataFrame
) -> dict[str, str]:
    """Marker name -> direction, validated; the default markers whose column either table has when None."""
    if markers is None:
        present = set(baseline.columns) | set(candidate.columns)
        return {name: d for name, d in DELTA_MARKER_DIRECTIONS.items() if _MARKER_PREFIX + name in present}
    resolved = {}
    for name, direction in markers.items():
        if direction not in _DIRECTIONS:
            raise StatisticsError(f"marker {name!r} has direction {direction!r}; use one of {sorted(_DIRECTIONS)}.")
        resolved[name.removeprefix(_MARKER_PREFIX)] = direction
    return resolved


def _resolve_guarded(name: str, metrics: tuple[str, ...]) -> str:
    """The report metric a must-not-regress name refers to ('pass^k'/'pass@k' stand for the k in use)."""
    if name in ("pass^k", "pass@k") and not any(m.startswith(name[:5]) and m != "pass@1" for m in metrics):
        name = "pass@1"  # with k == 1 both equal pass@1, which is the only pass row reported
    for metric in metrics:
        generic = metric[:5] + "k" if metric.startswith(("pass^", "pass@")) and metric != "pass@1" else metric
        if name in (metric, generic) or _MARKER_PREFIX + name == metric:
            return metric
    raise StatisticsError(f"must_not_regress names {name!r}, which is not a reported metric; use one of "
                          f"{list(metrics)}.")
