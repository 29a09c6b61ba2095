"""Verdicts of one paired comparison: interval and sign-flip test must agree before PASS or FAIL."""

import numpy as np
import pytest

from sim_pipeline.measure.stats import paired_bootstrap_ci, sign_flip_test
from sim_pipeline.measure.verdict import COMPARISON_COLUMNS, compare_paired, verdict_of


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
    assert verdict_of(low, high, sign=sign, p_value=p)["verdict"] == verdict


def test_compare_paired_uses_the_shared_statistics() -> None:
    rng = np.random.default_rng(0)
    before = rng.random(30)
    after = before + rng.normal(0.2, 0.1, size=30)
    after[3] = np.nan  # an undefined task on one side is left out of both
    row = compare_paired(before, after, seed=5, n_resamples=1000)
    assert tuple(row) == COMPARISON_COLUMNS
    diffs = np.delete(after - before, 3)
    interval = paired_bootstrap_ci(diffs, seed=5, n_resamples=1000)
    assert row["n_tasks"] == 29 and row["delta"] == pytest.approx(diffs.mean())
    assert (row["ci_low"], row["ci_high"]) == (interval.low, interval.high)
    assert row["p_value"] == sign_flip_test(diffs, seed=5, n_resamples=1000)
    assert row["verdict"] == "PASS"


def test_compare_paired_small_and_blocked() -> None:
    values = np.linspace(0, 1, 5)
    small = compare_paired(values, values + 0.5, min_tasks=6)
    assert small["verdict"] == "INSUFFICIENT DATA" and np.isnan(small["delta"])
    blocked = compare_paired(values, values + 0.5, blocked=("NOT COMPARABLE", "judges differ"), min_tasks=1)
    assert (blocked["verdict"], blocked["reason"]) == ("NOT COMPARABLE", "judges differ")
    assert blocked["before"] == pytest.approx(0.5) and blocked["after"] == pytest.approx(1.0)
