"""The calibrated rate band: its error rates hold exactly, its sample size is the least that works, clusters shrink n."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from sim_pipeline.defaults import RATE_BOUND_MAX_TRIALS
from sim_pipeline.measure.rate_bounds import (
    OVER,
    UNDECIDED,
    WITHIN,
    bound_clustered,
    bound_rate,
    decisive_trials,
    design_effect,
)

ALPHA, BETA = 0.001, 0.05


def _decisions(n: int, tolerated: float, limit: float) -> np.ndarray:
    return np.array([bound_rate(x, n, tolerated=tolerated, limit=limit, alpha=ALPHA, beta=BETA).decision
                     for x in range(n + 1)])


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 300), tolerated=st.sampled_from([0.01, 0.04, 0.06]), limit=st.sampled_from([0.1, 0.13, 0.25]))
def test_error_rates_hold_exactly_at_the_edges(n, tolerated, limit):
    decisions = _decisions(n, tolerated, limit)
    counts = np.arange(n + 1)
    # A rate at the limit is called within at most beta of the time; one at the tolerance over at most alpha.
    assert sps.binom.pmf(counts, n, limit)[decisions == WITHIN].sum() <= BETA + 1e-9
    assert sps.binom.pmf(counts, n, tolerated)[decisions == OVER].sum() <= ALPHA + 1e-9
    # More bad events never move a rate from over back to within.
    order = {WITHIN: 0, UNDECIDED: 1, OVER: 2}
    assert all(order[a] <= order[b] for a, b in zip(decisions, decisions[1:]))


@pytest.mark.parametrize(("tolerated", "limit"), [(0.06, 0.13), (0.04, 0.10), (0.04, 0.25), (0.0, 0.13)])
def test_decisive_trials_is_the_first_size_that_places_a_rate_at_the_tolerance(tolerated, limit):
    def placed(n: int) -> float:
        decisions = _decisions(n, tolerated, limit)
        return sps.binom.pmf(np.arange(n + 1), n, tolerated)[decisions == WITHIN].sum()

    n = decisive_trials(tolerated, limit, ALPHA, BETA)
    assert placed(n) >= 1 - ALPHA - 1e-9
    assert placed(n - 1) < 1 - ALPHA


def test_no_failure_in_29_trials_is_under_ten_percent():
    # The rule of three's exact form: 0.95 ** 29 < 0.05 <= 0.95 ** 28.
    assert decisive_trials(0.0, 0.10, ALPHA, BETA) == 29
    assert bound_rate(0, 29, tolerated=0.04, limit=0.10, alpha=ALPHA, beta=BETA).decision == WITHIN
    assert bound_rate(0, 28, tolerated=0.04, limit=0.10, alpha=ALPHA, beta=BETA).decision == UNDECIDED


def test_design_effect_counts_a_cluster_that_errs_together_as_one_trial():
    singletons = design_effect(np.r_[np.ones(10), np.zeros(90)], np.arange(100))
    assert singletons == pytest.approx(1.0, abs=0.02)
    # 20 tasks of 5 samples each; 2 tasks wrong on every sample: 10 bad rows that are really 2 observations.
    clusters = np.repeat(np.arange(20), 5)
    together = np.r_[np.ones(10), np.zeros(90)]
    assert design_effect(together, clusters) == pytest.approx(5.0, rel=0.1)
    assert design_effect(np.zeros(100), clusters) == 1.0 and design_effect(np.array([]), np.array([])) == 1.0
    spread = bound_clustered(np.r_[np.ones(10), np.zeros(90)], np.arange(100), tolerated=0.04, limit=0.25,
                             alpha=ALPHA, beta=BETA)
    lumped = bound_clustered(together, clusters, tolerated=0.04, limit=0.25, alpha=ALPHA, beta=BETA)
    assert lumped.n == pytest.approx(20, rel=0.1) and lumped.high > spread.high


def test_band_edges_must_be_ordered():
    with pytest.raises(ValueError, match="below limit"):
        decisive_trials(0.2, 0.1, ALPHA, BETA)


@pytest.mark.parametrize(("tolerated", "limit"), [(0.0, 0.05), (0.01, 0.02), (0.0833, 0.1), (0.29, 0.3)])
def test_decisive_trials_searched_in_blocks_is_the_first_size_of_the_whole_range(tolerated, limit):
    # The search stops at the first block holding an answer: the answer over n = 1..max at once, found far faster.
    n = np.arange(1, RATE_BOUND_MAX_TRIALS + 1)
    within = sps.binom.ppf(BETA, n, limit) - 1
    ok = (within >= 0) & (sps.binom.cdf(within, n, tolerated) >= 1.0 - ALPHA)
    whole = int(n[np.argmax(ok)]) if ok.any() else RATE_BOUND_MAX_TRIALS
    assert decisive_trials.__wrapped__(tolerated, limit, ALPHA, BETA) == whole
