"""Verdicts of one paired comparison: interval and sign-flip test agree before PASS or FAIL, a TOST before NO
DIFFERENCE, and too few tasks or a zero-width interval give INCONCLUSIVE."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_pipeline.defaults import DELTA_CI_METHOD, EQUIVALENCE_ALPHA, EQUIVALENCE_MARGIN, MIN_TASKS_FOR_VERDICT
from sim_pipeline.measure.stats import equivalence_test, paired_bootstrap_ci, sign_flip_test
from sim_pipeline.measure.verdict import COMPARISON_COLUMNS, compare_paired, verdict_of

ENOUGH = MIN_TASKS_FOR_VERDICT + 20  # a task count at which the verdict may decide
EQUIVALENT, NOT_EQUIVALENT = EQUIVALENCE_ALPHA / 10, 0.5  # TOST p-values that do and do not pass


@pytest.mark.parametrize(
    ("low", "high", "sign", "p", "verdict"),
    [
        (0.10, 0.30, 1.0, 0.001, "PASS"),
        (0.10, 0.30, -1.0, 0.001, "FAIL"),  # lower is better: a rise is a regression
        (-0.30, -0.10, 1.0, 0.001, "FAIL"),
        (0.10, 0.30, 1.0, 0.25, "INCONCLUSIVE"),  # interval alone, test disagrees (few tasks)
        (-0.02, 0.03, 1.0, 0.6, "NO DIFFERENCE"),
        (-0.02, 0.20, 1.0, 0.2, "INCONCLUSIVE"),
    ],
)
def test_verdict_of(low: float, high: float, sign: float, p: float, verdict: str) -> None:
    # The TOST p passed in agrees with the interval (inside the margin or not), as compare_paired's does.
    inside = max(abs(low), abs(high)) < EQUIVALENCE_MARGIN
    got = verdict_of(low, high, sign=sign, p_value=p, n_tasks=ENOUGH,
                     equivalence_p=EQUIVALENT if inside else NOT_EQUIVALENT)
    assert got["verdict"] == verdict


@pytest.mark.parametrize("n_tasks", [2, 10, MIN_TASKS_FOR_VERDICT - 1])
def test_too_few_tasks_is_inconclusive_even_for_a_clear_interval(n_tasks: int) -> None:
    for low, high, p, eq in ((0.10, 0.30, 0.001, NOT_EQUIVALENT), (-0.01, 0.01, 0.9, EQUIVALENT)):
        got = verdict_of(low, high, sign=1.0, p_value=p, n_tasks=n_tasks, equivalence_p=eq)
        assert got["verdict"] == "INCONCLUSIVE"
        assert f"a verdict needs {MIN_TASKS_FOR_VERDICT}" in got["reason"]
    assert verdict_of(0.10, 0.30, sign=1.0, p_value=0.001, n_tasks=MIN_TASKS_FOR_VERDICT,
                      equivalence_p=NOT_EQUIVALENT)["verdict"] == "PASS"


@pytest.mark.parametrize(("low", "high"), [(0.0, 0.0), (0.25, 0.25), (-0.5, -0.5)])
def test_zero_width_interval_is_inconclusive(low: float, high: float) -> None:
    # A [0, 0] interval used to read NO DIFFERENCE; [x, x] away from 0 used to read PASS/FAIL.
    got = verdict_of(low, high, sign=1.0, p_value=0.001, n_tasks=ENOUGH, equivalence_p=EQUIVALENT)
    assert got["verdict"] == "INCONCLUSIVE" and "zero width" in got["reason"]


def test_no_difference_needs_the_equivalence_test() -> None:
    inside = verdict_of(-0.02, 0.03, sign=1.0, p_value=0.6, n_tasks=ENOUGH, equivalence_p=EQUIVALENCE_ALPHA)
    assert inside["verdict"] == "INCONCLUSIVE" and "equivalence test does not confirm" in inside["reason"]
    nan_tost = verdict_of(-0.02, 0.03, sign=1.0, p_value=0.6, n_tasks=ENOUGH, equivalence_p=float("nan"))
    assert nan_tost["verdict"] == "INCONCLUSIVE"


def test_tight_interval_near_zero_is_no_difference_and_a_wide_one_is_not() -> None:
    rng = np.random.default_rng(3)
    n = 120
    before = (rng.random((n, 4)) < rng.beta(0.3, 0.7, (n, 1))).astype(float)
    after = before.copy()
    after[::12, 0] = 1.0 - after[::12, 0]  # one sample of every 12th task flips: a negligible change
    tight = compare_paired(before.mean(axis=1), after.mean(axis=1), n_resamples=2000)
    assert tight["verdict"] == "NO DIFFERENCE"
    assert -EQUIVALENCE_MARGIN < tight["ci_low"] < 0 < tight["ci_high"] < EQUIVALENCE_MARGIN
    base = rng.random(ENOUGH)
    wide = compare_paired(base, np.clip(base + rng.normal(0, 0.3, ENOUGH), 0, 1), n_resamples=2000)
    assert wide["ci_low"] < 0 < wide["ci_high"] and wide["ci_high"] - wide["ci_low"] > 2 * EQUIVALENCE_MARGIN
    assert wide["verdict"] == "INCONCLUSIVE" and "reaches past" in wide["reason"]


def test_identical_sides_are_inconclusive_not_no_difference() -> None:
    values = np.linspace(0, 1, ENOUGH)
    row = compare_paired(values, values.copy(), n_resamples=500)
    assert (row["delta"], row["ci_low"], row["ci_high"], row["p_value"]) == (0.0, 0.0, 0.0, 1.0)
    assert row["verdict"] == "INCONCLUSIVE"


_interval = st.tuples(st.floats(-1, 1), st.floats(0, 0.6)).map(lambda lw: (lw[0], min(1.0, lw[0] + lw[1])))


@settings(max_examples=300, deadline=None)
@given(_interval, st.sampled_from([1.0, -1.0]), st.floats(0, 1), st.floats(0, 1) | st.just(float("nan")),
       st.integers(2, 200))
def test_verdict_rules_hold_for_any_inputs(
    interval: tuple[float, float], sign: float, p: float, equivalence_p: float, n_tasks: int
) -> None:
    low, high = interval
    verdict = verdict_of(low, high, sign=sign, p_value=p, n_tasks=n_tasks, equivalence_p=equivalence_p)["verdict"]
    if verdict != "INCONCLUSIVE":
        assert n_tasks >= MIN_TASKS_FOR_VERDICT and high > low
    if verdict == "NO DIFFERENCE":
        # Never when the interval reaches past the margin, and only when the TOST passes.
        assert -EQUIVALENCE_MARGIN < low <= high < EQUIVALENCE_MARGIN and equivalence_p < EQUIVALENCE_ALPHA
    if verdict in ("PASS", "FAIL"):
        assert (low > 0 or high < 0) and p < 0.05
        assert (verdict == "PASS") == (sign * (low + high) > 0)


@settings(max_examples=40, deadline=None)
@given(st.integers(MIN_TASKS_FOR_VERDICT, 60), st.floats(-0.3, 0.3), st.integers(0, 2**31))
def test_compare_paired_no_difference_only_inside_the_margin(n: int, shift: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    before = rng.binomial(4, rng.beta(0.3, 0.7, n)) / 4
    after = np.clip(before + rng.choice([-0.25, 0.0, 0.25], size=n, p=[0.1, 0.8, 0.1]) + shift * (rng.random(n) < 0.5),
                    0, 1)
    row = compare_paired(before, after, n_resamples=500, seed=seed % 1000)
    if row["verdict"] == "NO DIFFERENCE":
        assert -EQUIVALENCE_MARGIN < row["ci_low"] <= row["ci_high"] < EQUIVALENCE_MARGIN
    if row["verdict"] in ("PASS", "FAIL"):
        assert row["ci_low"] > 0 or row["ci_high"] < 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([-0.5, -0.25, 0.0, 0.25, 0.5]), min_size=5, max_size=60),
       st.floats(0.01, 0.2), st.integers(0, 1000))
def test_tost_agrees_with_the_interval_it_is_read_from(values: list[float], margin: float, seed: int) -> None:
    # p < alpha/2 exactly when the same-seed symmetric interval lies inside +/-margin (documented in stats.py).
    interval = paired_bootstrap_ci(values, method="studentized_symmetric", n_resamples=400, seed=seed)
    p = equivalence_test(values, margin=margin, n_resamples=400, seed=seed)
    if interval.high == interval.low:
        assert np.isnan(p)  # no spread: nothing to test against
    else:
        assert (p < EQUIVALENCE_ALPHA) == (-margin < interval.low and interval.high < margin)


def test_compare_paired_uses_the_shared_statistics() -> None:
    rng = np.random.default_rng(0)
    before = rng.random(30)
    after = before + rng.normal(0.2, 0.1, size=30)
    after[3] = np.nan  # an undefined task on one side is left out of both
    row = compare_paired(before, after, seed=5, n_resamples=1000)
    assert tuple(row) == COMPARISON_COLUMNS
    diffs = np.delete(after - before, 3)
    # The rates' differences lie in [-1, 1]; the values here reach past 1, so the bound widens with them.
    values = np.concatenate([np.delete(before, 3), np.delete(after, 3)])
    reach = max(1.0, values.max()) - min(0.0, values.min())
    interval = paired_bootstrap_ci(diffs, seed=5, n_resamples=1000, method=DELTA_CI_METHOD, bounds=(-reach, reach))
    assert row["n_tasks"] == 29 and row["delta"] == pytest.approx(diffs.mean())
    assert (row["ci_low"], row["ci_high"]) == (interval.low, interval.high)
    assert row["p_value"] == sign_flip_test(diffs, seed=5, n_resamples=1000)
    assert row["verdict"] == "PASS"


def test_sparse_differences_have_no_interval_not_a_fallback_one() -> None:
    # Two of 100 tasks moved: most resamples have no spread, so the data cannot bound the delta. The bootstrap's
    # interval falls back to the +/-1 a difference of rates allows; that is no estimate, so none is recorded
    # (it was printed as [-1.000, +1.000] before) and the reason says why.
    before = np.zeros(100)
    after = before.copy()
    after[:2] = 1.0
    row = compare_paired(before, after, n_resamples=2000)
    assert np.isnan(row["ci_low"]) and np.isnan(row["ci_high"]) and row["verdict"] == "INCONCLUSIVE"
    assert row["reason"].startswith("no spread to bound the delta: only 2 of 100 tasks differ")
    assert row["delta"] == pytest.approx(0.02) and row["p_value"] == pytest.approx(0.5, abs=0.05)


def test_compare_paired_small_and_blocked() -> None:
    values = np.linspace(0, 1, 5)
    small = compare_paired(values, values + 0.5, min_tasks=6)
    assert small["verdict"] == "INSUFFICIENT DATA" and np.isnan(small["delta"])
    shown = compare_paired(values, values + 0.5, min_tasks=5)  # computed, but too few tasks to decide
    assert shown["delta"] == pytest.approx(0.5) and shown["verdict"] == "INCONCLUSIVE"
    blocked = compare_paired(values, values + 0.5, blocked=("NOT COMPARABLE", "judges differ"), min_tasks=1)
    assert (blocked["verdict"], blocked["reason"]) == ("NOT COMPARABLE", "judges differ")
    assert blocked["before"] == pytest.approx(0.5) and blocked["after"] == pytest.approx(1.0)
