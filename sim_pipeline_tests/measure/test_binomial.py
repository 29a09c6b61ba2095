"""measure/binomial.py returns scipy.stats's floats bit for bit (the warehouse's bytes depend on it)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from sim_pipeline.measure.binomial import (
    benjamini_hochberg,
    beta_ppf,
    binom_cdf,
    binom_pmf,
    binom_ppf,
    binom_sf,
    binomtest_pvalue,
)

RNG = np.random.default_rng(20261204)
N = RNG.integers(0, 3000, 40_000).astype(float)
K = np.floor(RNG.uniform(-0.2, 1.2, N.size) * N)
P = RNG.uniform(0, 1, N.size)
P[:500], P[500:1000] = 0.0, 1.0  # the edges of p
K[1000:1500], K[1500:2000] = N[1000:1500], -1.0  # the edges of the support
Q = RNG.uniform(0, 1, N.size)
Q[:300], Q[300:600], Q[600:900] = 0.0, 1.0, 0.05


def _outcome(test, *args):
    """A function's value, or the type of what it raised (Boost overflows on subnormal p in both)."""
    try:
        return test(*args)
    except ArithmeticError as error:
        return type(error)


def _same(mine, theirs) -> None:
    np.testing.assert_array_equal(np.asarray(mine, dtype=float), np.asarray(theirs, dtype=float), strict=False)


def test_binomial_functions_match_scipy_stats_on_random_draws():
    _same(binom_cdf(K, N, P), stats.binom.cdf(K, N, P))
    _same(binom_sf(K, N, P), stats.binom.sf(K, N, P))
    _same(binom_pmf(K, N, P), stats.binom.pmf(K, N, P))
    _same(binom_pmf(K + 0.5, N, P), stats.binom.pmf(K + 0.5, N, P))  # off the integers: 0
    _same(binom_ppf(Q, N, P), stats.binom.ppf(Q, N, P))


def test_binomial_functions_match_scipy_stats_on_the_grid_decisive_trials_walks():
    n = np.arange(1, 20_001)
    for limit in (0.05, 0.2, 0.5, 1.0):
        for q in (0.01, 0.05, 0.2):
            within = binom_ppf(q, n, limit) - 1
            _same(within, stats.binom.ppf(q, n, limit) - 1)
            for tolerated in (0.0, 0.02, 0.1):
                _same(binom_cdf(within, n, tolerated), stats.binom.cdf(within, n, tolerated))


def test_beta_ppf_matches_scipy_stats():
    q = np.concatenate([RNG.uniform(0, 1, 20_000), [0.0, 1.0, 0.01, 0.05, 0.95, 0.99]])
    a, b = RNG.uniform(1e-3, 500, q.size), RNG.uniform(1e-3, 500, q.size)
    a[::3], b[::4] = np.round(a[::3]) + 1, np.round(b[::4]) + 1  # whole counts, as Clopper-Pearson's are mostly
    _same(beta_ppf(q, a, b), stats.beta.ppf(q, a, b))


@pytest.mark.parametrize("p", [0.5, 0.3, 0.01, 0.0, 1.0])
def test_binomtest_pvalue_matches_scipy_stats_for_every_k_up_to_n_60(p):
    for n in range(1, 61):
        for k in range(n + 1):
            assert binomtest_pvalue(k, n, p) == stats.binomtest(k, n, p).pvalue, (k, n, p)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 5000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
       st.floats(0.0, 1.0))
def test_binomtest_pvalue_matches_scipy_stats_on_random_cases(kn, p):
    k, n = kn
    assert _outcome(binomtest_pvalue, k, n, p) == _outcome(lambda *a: stats.binomtest(*a).pvalue, k, n, p)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(0.0, 1.0), st.sampled_from([0.0, 1.0, 0.05, 0.5])), min_size=0, max_size=60))
def test_benjamini_hochberg_matches_scipy_stats(ps):
    ps = np.asarray(ps, dtype=float)
    _same(benjamini_hochberg(ps), stats.false_discovery_control(ps, method="bh"))


def test_benjamini_hochberg_refuses_what_scipy_refuses():
    with pytest.raises(ValueError):
        benjamini_hochberg(np.array([0.1, 1.5]))
