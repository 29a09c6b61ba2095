"""A bad-event rate placed against a tolerance band from its confidence bounds, not its point estimate.

A check on a rate (a judge's disagreement with gold, its leak, a probe's exploit rate) names two edges: `tolerated`,
the rate a careful judge has, and `limit`, a rate that must never be trusted. The rate is WITHIN when its upper bound
(Clopper & Pearson 1934, one-sided at 1 - beta) is under the limit, so a rate at or over the limit is called within
at most a share beta of the time; it is OVER when not within and its lower bound (one-sided at 1 - alpha) is above
the tolerance, so a rate at or under the tolerance is called over at most a share alpha of the time; otherwise it is
UNDECIDED: the data cannot place it, and `decisive_trials` says how many trials a rate at the tolerance needs to be
called within with probability at least 1 - alpha (the indifference-zone sample size of a binomial test).

Rows that share a task err together (a judge misreads a task on every sample of it), so counts are shrunk to an
effective size by Kish's design effect over clusters (Kish 1965, ch. 8) before they are bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike

from sim_pipeline.defaults import RATE_BOUND_FIRST_TRIALS, RATE_BOUND_MAX_TRIALS
from sim_pipeline.measure.binomial import beta_ppf, binom_cdf, binom_ppf

WITHIN, OVER, UNDECIDED = "within", "over", "undecided"


@dataclass(frozen=True)
class RateBound:
    """A rate with its bounds, effective trials, where it falls in the band, and the trials a decision needs."""

    rate: float
    low: float
    high: float
    n: float
    decision: str
    needed: int


def bound_rate(bad: float, n: float, *, tolerated: float, limit: float, alpha: float, beta: float) -> RateBound:
    """Place `bad` events in `n` trials (effective counts may be fractional) against the band [tolerated, limit]."""
    needed = decisive_trials(tolerated, limit, alpha, beta)
    if n <= 0:
        return RateBound(float("nan"), 0.0, 1.0, 0.0, UNDECIDED, needed)
    bad = min(max(float(bad), 0.0), float(n))
    high = 1.0 if bad >= n else float(beta_ppf(1.0 - beta, bad + 1.0, n - bad))
    low = lower_bound(bad, n, alpha)
    decision = WITHIN if high < limit else OVER if low > tolerated else UNDECIDED
    return RateBound(bad / n, low, high, float(n), decision, needed)


def lower_bound(bad: float, n: float, alpha: float) -> float:
    """The one-sided Clopper-Pearson lower bound at confidence 1 - alpha (0 with no bad event)."""
    return 0.0 if bad <= 0 or n <= 0 else float(beta_ppf(alpha, bad, n - bad + 1.0))


@lru_cache(maxsize=64)
def decisive_trials(tolerated: float, limit: float, alpha: float, beta: float) -> int:
    """The fewest trials at which a rate exactly at `tolerated` is called WITHIN with probability >= 1 - alpha.

    With n trials the largest count still within is c = F^-1(beta; n, limit) - 1 (the Clopper-Pearson upper bound
    of c is under the limit exactly when P(X <= c | limit) < beta); the answer is the first n with
    P(X <= c | n, tolerated) >= 1 - alpha. RATE_BOUND_MAX_TRIALS when no n up to it suffices.
    """
    if not 0.0 <= tolerated < limit <= 1.0:
        raise ValueError(f"tolerated {tolerated} must be below limit {limit}, both in [0, 1]")
    # In blocks that double, from the smallest n: the answer is usually in the first few hundred, and each n costs
    # a quantile and a cdf (every n up to the maximum at once was 5% of a cold `make run`). Elementwise: the same n
    # gives the same answer in any block.
    start, size = 1, RATE_BOUND_FIRST_TRIALS
    while start <= RATE_BOUND_MAX_TRIALS:
        n = np.arange(start, min(start + size, RATE_BOUND_MAX_TRIALS + 1))
        within = binom_ppf(beta, n, limit) - 1
        ok = (within >= 0) & (binom_cdf(within, n, tolerated) >= 1.0 - alpha)
        if ok.any():
            return int(n[np.argmax(ok)])
        start, size = start + size, 2 * size
    return RATE_BOUND_MAX_TRIALS


def design_effect(bad: ArrayLike, clusters: ArrayLike) -> float:
    """Kish's design effect of a proportion over clustered rows: its variance with clusters over its variance if
    the rows were independent, at least 1 (1 when the rate is 0 or 1, or there is one cluster)."""
    x = np.asarray(bad, dtype=float)
    if x.size == 0:
        return 1.0
    _, cluster = np.unique(np.asarray(clusters).astype(str), return_inverse=True)
    k = int(cluster.max()) + 1
    p = float(x.mean())
    if k < 2 or p in (0.0, 1.0):
        return 1.0
    sums, sizes = np.bincount(cluster, weights=x, minlength=k), np.bincount(cluster, minlength=k)
    clustered = k / (k - 1) * float(np.sum((sums - p * sizes) ** 2)) / x.size**2
    return max(1.0, clustered / (p * (1.0 - p) / x.size))


def effective_counts(bad: ArrayLike, clusters: ArrayLike) -> tuple[float, float]:
    """(bad events, trials) of rows flagged bad (0/1), both shrunk by the rows' design effect."""
    x = np.asarray(bad, dtype=float)
    n_eff = x.size / design_effect(x, clusters)
    return (float(x.mean()) * n_eff if x.size else 0.0), n_eff


def bound_clustered(bad: ArrayLike, clusters: ArrayLike, *, tolerated: float, limit: float, alpha: float,
                    beta: float) -> RateBound:
    """`bound_rate` over rows flagged bad (0/1), with the trials shrunk by the rows' design effect."""
    return bound_rate(*effective_counts(bad, clusters), tolerated=tolerated, limit=limit, alpha=alpha, beta=beta)
