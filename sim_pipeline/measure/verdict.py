"""One paired comparison: bootstrap interval, sign-flip p and TOST of per-task differences, and the verdict they give.

How many tasks a verdict needs, in two steps: below `min_tasks` (`DELTA_MIN_SHARED_TASKS` for a delta,
`DELTA_SLICE_MIN_TASKS` for a slice) nothing is computed (INSUFFICIENT DATA); from there up to
`MIN_TASKS_FOR_VERDICT` the delta, interval and p are shown but the verdict is INCONCLUSIVE, because below it the
interval does not hold its coverage (sim_pipeline_tests/bench/bench_coverage.py).
"""

import math

import numpy as np

from sim_pipeline.defaults import (
    BOOTSTRAP_RESAMPLES,
    CI_LEVEL,
    DELTA_ALPHA,
    DELTA_MIN_SHARED_TASKS,
    EQUIVALENCE_ALPHA,
    EQUIVALENCE_MARGIN,
    FLOAT_TIE_RTOL,
    MIN_TASKS_FOR_VERDICT,
)
from sim_pipeline.measure.stats import equivalence_test, paired_bootstrap_ci, sign_flip_test

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

    Interval: paired symmetric studentized bootstrap over tasks (Hall 1988; `DELTA_CI_METHOD`), bounded by the
    largest difference the values allow; p: two-sided sign-flip permutation test (Fisher 1935); equivalence:
    TOST against `EQUIVALENCE_MARGIN` (Schuirmann 1987). `sign` is +1 when higher is better, -1 when lower is
    better; `blocked` is a (verdict, reason) that overrides the test when the two sides cannot be compared at all.
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
    bounds = _difference_bounds(before[usable], after[usable])
    interval = paired_bootstrap_ci(diffs, n_resamples=n_resamples, level=CI_LEVEL, bounds=bounds, seed=seed)
    p_value = sign_flip_test(diffs, n_resamples=n_resamples, seed=seed)
    equivalence_p = equivalence_test(diffs, margin=EQUIVALENCE_MARGIN, n_resamples=n_resamples, seed=seed)
    row |= {"delta": interval.estimate, "ci_low": interval.low, "ci_high": interval.high, "p_value": p_value}
    if interval.low <= bounds[0] or interval.high >= bounds[1]:
        # The bootstrap could not bound the delta (resamples with no spread send t* to infinity) and the interval
        # fell back to the widest difference the values allow: that is no estimate, so none is recorded.
        moved = int(np.count_nonzero(diffs))
        return row | {"ci_low": nan, "ci_high": nan, "verdict": INCONCLUSIVE,
                      "reason": f"no spread to bound the delta: only {moved} of {diffs.size} tasks differ between "
                                "the versions, so the bootstrap cannot say how far it could be; add held-out tasks."}
    return row | verdict_of(interval.low, interval.high, sign=sign, p_value=p_value, n_tasks=int(diffs.size),
                            equivalence_p=equivalence_p)


def verdict_of(
    low: float, high: float, *, sign: float, p_value: float, n_tasks: int, equivalence_p: float
) -> dict[str, str]:
    """PASS/FAIL when the interval excludes 0 and the sign-flip test agrees; NO DIFFERENCE when the TOST does.

    Every verdict but INCONCLUSIVE needs at least `MIN_TASKS_FOR_VERDICT` tasks and an interval of non-zero width.
    """
    span = f"{CI_LEVEL:.0%} interval [{low:+.3f}, {high:+.3f}], p={p_value:.3g}"
    if not (math.isfinite(low) and math.isfinite(high)):
        return {"verdict": INCONCLUSIVE, "reason": f"no interval from {n_tasks} task(s); add held-out tasks."}
    if n_tasks < MIN_TASKS_FOR_VERDICT:
        # Below this the interval under-covers (bench_coverage), so a verdict would overstate what is known.
        return {"verdict": INCONCLUSIVE,
                "reason": f"{span}: only {n_tasks} paired tasks; a verdict needs {MIN_TASKS_FOR_VERDICT} "
                          "(see holdout_size)."}
    if high - low <= FLOAT_TIE_RTOL * max(1.0, abs(low), abs(high)):
        # Every task moved by the same amount (usually 0): the tasks show no spread, so they cannot say how far
        # the delta on other tasks could be; a [0, 0] interval is not evidence of no difference.
        return {"verdict": INCONCLUSIVE,
                "reason": f"{span}: every task has the same difference, so the interval has zero width and says "
                          "nothing about the spread; add held-out tasks or samples per task."}
    side = "better" if sign * low > 0 and sign * high > 0 else "worse" if sign * low < 0 and sign * high < 0 else ""
    if side and p_value < DELTA_ALPHA:
        return {"verdict": PASS if side == "better" else FAIL, "reason": f"{span}: wholly on the {side} side of 0."}
    if side:
        # The exact sign-flip test guards the interval's small-sample error, so a lone interval does not decide.
        return {"verdict": INCONCLUSIVE,
                "reason": f"{span}: the interval lies on the {side} side of 0 but the sign-flip test does not "
                          f"confirm it (p >= {DELTA_ALPHA}); add held-out tasks (see holdout_size)."}
    tost = f"equivalence (TOST) p={equivalence_p:.3g}"
    inside = max(abs(low), abs(high)) < EQUIVALENCE_MARGIN
    if inside and equivalence_p < EQUIVALENCE_ALPHA:
        return {"verdict": NO_DIFFERENCE,
                "reason": f"{span}, {tost}: lies within +/-{EQUIVALENCE_MARGIN} (no meaningful change)."}
    return {"verdict": INCONCLUSIVE,
            "reason": f"{span}, {tost}: contains 0 but "
                      + (f"reaches past +/-{EQUIVALENCE_MARGIN}" if not inside
                         else f"the equivalence test does not confirm +/-{EQUIVALENCE_MARGIN}")
                      + "; add held-out tasks (see holdout_size)."}


def _difference_bounds(before: np.ndarray, after: np.ndarray) -> tuple[float, float]:
    """The widest a mean difference can be: +/-1 for rates, wider if the per-task values leave [0, 1]."""
    values = np.concatenate([before, after])
    low = min(0.0, float(values.min())) if values.size else 0.0
    high = max(1.0, float(values.max())) if values.size else 1.0
    return low - high, high - low
