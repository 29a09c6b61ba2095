"""scipy.stats's binomial and beta functions that the pipeline uses, computed from scipy.special bit for bit.

`import scipy.stats` pulls in scipy.optimize, linalg, sparse, spatial, interpolate and integrate: ~45 MB of a
`sim-pipeline run`'s peak RSS and ~3 CPU-s, for four numbers. scipy.stats.binom and .beta are thin wrappers over
Boost ufuncs that live in scipy.special (`scipy.special._ufuncs._binom_cdf` and friends, which
scipy/stats/_discrete_distns.py calls); this module calls the same ufuncs with the wrappers' edge cases, so every
value is the float scipy.stats returns (sim_pipeline_tests/measure/test_binomial.py compares them on grids and
random draws, and fails if a scipy upgrade renames a ufunc or changes a value).
"""

from __future__ import annotations

import numpy as np
import scipy.special._ufuncs as _boost  # the Boost ufuncs scipy.stats.binom/beta call; private, pinned by a test
from numpy.typing import ArrayLike
from scipy import special

_TIE_RTOL = 1e-7  # scipy.stats.binomtest's relative tolerance for a pmf equal to the observed one (its `rerr`)


def beta_ppf(q: ArrayLike, a: ArrayLike, b: ArrayLike) -> np.ndarray:
    """scipy.stats.beta.ppf(q, a, b) for a, b > 0 and q in [0, 1] (Boost's ibeta_inv, as scipy.stats calls it)."""
    return special.betaincinv(a, b, q)


def binom_cdf(k: ArrayLike, n: ArrayLike, p: ArrayLike) -> np.ndarray:
    """scipy.stats.binom.cdf(k, n, p) for integer n >= 0 and p in [0, 1]: 0 below the support, 1 at or above n."""
    k, n, p = np.broadcast_arrays(np.floor(np.asarray(k, dtype=float)), np.asarray(n, dtype=float),
                                  np.asarray(p, dtype=float))
    inside = (k >= 0) & (k < n)
    out = np.where(k >= n, 1.0, 0.0)
    out[inside] = _boost._binom_cdf(k[inside], n[inside], p[inside])
    return out


def binom_sf(k: ArrayLike, n: ArrayLike, p: ArrayLike) -> np.ndarray:
    """scipy.stats.binom.sf(k, n, p) for integer n >= 0 and p in [0, 1]: 1 below the support, 0 at or above n."""
    k, n, p = np.broadcast_arrays(np.floor(np.asarray(k, dtype=float)), np.asarray(n, dtype=float),
                                  np.asarray(p, dtype=float))
    inside = (k >= 0) & (k < n)
    out = np.where(k < 0, 1.0, 0.0)
    out[inside] = _boost._binom_sf(k[inside], n[inside], p[inside])
    return out


def binom_pmf(k: ArrayLike, n: ArrayLike, p: ArrayLike) -> np.ndarray:
    """scipy.stats.binom.pmf(k, n, p) for integer n >= 0 and p in [0, 1]: 0 off the integers 0..n."""
    k, n, p = np.broadcast_arrays(np.asarray(k, dtype=float), np.asarray(n, dtype=float), np.asarray(p, dtype=float))
    inside = (k >= 0) & (k <= n) & (np.floor(k) == k)
    out = np.zeros(k.shape)
    out[inside] = _boost._binom_pmf(k[inside], n[inside], p[inside])
    return out


def binom_ppf(q: ArrayLike, n: ArrayLike, p: ArrayLike) -> np.ndarray:
    """scipy.stats.binom.ppf(q, n, p) for integer n >= 0, p in [0, 1] and q in [0, 1]: -1 at q = 0, n at q = 1."""
    q, n, p = np.broadcast_arrays(np.asarray(q, dtype=float), np.asarray(n, dtype=float), np.asarray(p, dtype=float))
    inside = (q > 0) & (q < 1)
    out = np.where(q == 1, n, -1.0)
    out[inside] = _boost._binom_ppf(q[inside], n[inside], p[inside])
    return out


def binomtest_pvalue(k: int, n: int, p: float = 0.5) -> float:
    """scipy.stats.binomtest(k, n, p).pvalue (two-sided): the outcomes no likelier than k, by scipy's own steps."""
    if not 0 <= k <= n or n < 1 or not 0.0 <= p <= 1.0:
        raise ValueError(f"binomtest needs 0 <= k ({k}) <= n ({n}), n >= 1 and p ({p}) in [0, 1]")

    def pmf(x: float) -> float:
        return float(binom_pmf(x, n, p))

    d = pmf(k)
    rerr = 1 + _TIE_RTOL
    if k == p * n:
        return 1.0
    if k < p * n:
        ix = _binary_search(lambda x: -pmf(x), -d * rerr, np.ceil(p * n), n)
        y = n - ix + int(d * rerr == pmf(ix))
        pval = float(binom_cdf(k, n, p)) + float(binom_sf(n - y, n, p))
    else:
        ix = _binary_search(pmf, d * rerr, 0, np.floor(p * n))
        pval = float(binom_cdf(ix, n, p)) + float(binom_sf(k - 1, n, p))
    return min(1.0, pval)


def _binary_search(a, d: float, lo: float, hi: float) -> float:
    """The i in [lo, hi] with a(i) <= d < a(i + 1), `a` ascending (scipy.stats._binomtest's search, step for step)."""
    while lo < hi:
        mid = lo + (hi - lo) // 2
        midval = a(mid)
        if midval < d:
            lo = mid + 1
        elif midval > d:
            hi = mid - 1
        else:
            return mid
    return lo if a(lo) <= d else lo - 1


def benjamini_hochberg(p_values: ArrayLike) -> np.ndarray:
    """scipy.stats.false_discovery_control(p_values, method="bh") of a 1-D array of p-values in [0, 1]."""
    ps = np.asarray(p_values)
    if not (np.issubdtype(ps.dtype, np.integer) or np.issubdtype(ps.dtype, np.floating)) \
            or not np.all(ps == np.clip(ps, 0.0, 1.0)):
        raise ValueError("`ps` must include only numbers between 0 and 1.")
    if ps.size <= 1:
        return ps
    m = ps.shape[-1]
    order = np.argsort(ps)
    ps = np.take_along_axis(ps, order, axis=-1)
    ps = ps * (m / np.arange(1, m + 1, dtype=ps.dtype))
    np.minimum.accumulate(ps[::-1], out=ps[::-1])
    out = np.empty_like(ps)
    out[order] = ps
    return np.clip(out, 0.0, 1.0)
