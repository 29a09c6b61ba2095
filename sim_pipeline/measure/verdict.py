"""One paired comparison: bootstrap interval and sign-flip p of per-task differences, and the verdict they give."""

import numpy as np

from sim_pipeline.defaults import (
    BOOTSTRAP_RESAMPLES,
    CI_LEVEL,
    DELTA_ALPHA,
    DELTA_EQUIVALENCE_MARGIN,
    DELTA_MIN_SHARED_TASKS,
)
from sim_pipeline.measure.stats import paired_bootstrap_ci, sign_flip_test

PASS, FAIL, NO_DIFFERENCE, INCONCLUSIVE = "PASS", "FAIL", "NO DIFFERENCE", "INCONCLUSIVE"
NOT_COMPARABLE, INSUFFICIENT_DATA = "NOT COMPARABLE", "INSUFFICIENT DATA"
VERDICTS: tuple[str, ...] = (PASS, FAIL, NO_DIFFERENCE, INCONCLUSIVE, NOT_COMPARABLE, INSUFFICIENT_DATA)
COMPARISON_COLUMNS: tuple[str, ...] = (
    "n_tasks", "before", "after", "delta", "ci_low", "ci_high", "p_value", "verdict", "reason",
)


def compare_paired(
    before: np.ndarray,
    after: np.ndarray,
    *,
    sign: float = 1.0,
    blocked: tuple[str, str] | None = None,
    min_tasks: int = DELTA_MIN_SHARED_TASKS,
    seed: int = 0,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
) -> dict[str, object]:
    """The `COMPARISON_COLUMNS` of one paired comparison of per-task values (after - before).

    Interval: paired percentile bootstrap over tasks (Efron & Tibshirani 1993); p: two-sided sign-flip
    permutation test (Fisher 1935). `sign` is +1 when higher is better, -1 when lower is better; `blocked`
    is a (verdict, reason) that overrides the test when the two sides cannot be compared at all.
    """
    usable = np.isfinite(before) & np.isfinite(after)
    diffs = after[usable] - before[usable]
    nan = float("nan")
    row: dict[str, object] = {
        "n_tasks": int(usable.sum()), "before": float(before[usable].mean()) if usable.any() else nan,
        "after": float(after[usable].mean()) if usable.any() else nan, "delta": nan, "ci_low": nan,
        "ci_high": nan, "p_value": nan,
    }
    if blocked is not None:
        return row | {"verdict": blocked[0], "reason": blocked[1]}
    if diffs.size < min_tasks:
        return row | {"verdict": INSUFFICIENT_DATA,
                      "reason": f"only {diffs.size} shared tasks have this metric on both sides; need "
                                f"{min_tasks} (fewer than k samples, or a marker column missing)."}
    interval = paired_bootstrap_ci(diffs, n_resamples=n_resamples, level=CI_LEVEL, seed=seed)
    p_value = sign_flip_test(diffs, n_resamples=n_resamples, seed=seed)
    row |= {"delta": interval.estimate, "ci_low": interval.low, "ci_high": interval.high, "p_value": p_value}
    return row | verdict_of(interval.low, interval.high, sign=sign, p_value=p_value)


def verdict_of(low: float, high: float, *, sign: float, p_value: float) -> dict[str, str]:
    """PASS/FAIL when the interval excludes 0 and the test agrees; NO DIFFERENCE inside the equivalence margin."""
    span = f"{CI_LEVEL:.0%} interval [{low:+.3f}, {high:+.3f}], p={p_value:.3g}"
    side = "better" if sign * low > 0 and sign * high > 0 else "worse" if sign * low < 0 and sign * high < 0 else ""
    if side and p_value < DELTA_ALPHA:
        return {"verdict": PASS if side == "better" else FAIL, "reason": f"{span}: wholly on the {side} side of 0."}
    if side:
        # With few tasks the percentile bootstrap is too narrow (it ignores small-sample spread); the exact
        # sign-flip test is not, so a lone interval does not decide.
        return {"verdict": INCONCLUSIVE,
                "reason": f"{span}: the interval lies on the {side} side of 0 but the sign-flip test does not "
                          f"confirm it (p >= {DELTA_ALPHA}); add held-out tasks (see holdout_size)."}
    if max(abs(low), abs(high)) < DELTA_EQUIVALENCE_MARGIN:
        return {"verdict": NO_DIFFERENCE,
                "reason": f"{span}: contains 0 and lies within +/-{DELTA_EQUIVALENCE_MARGIN} (no meaningful "
                          "change)."}
    return {"verdict": INCONCLUSIVE,
            "reason": f"{span}: contains 0 but reaches past +/-{DELTA_EQUIVALENCE_MARGIN}; add held-out tasks "
                      f"(see holdout_size)."}
