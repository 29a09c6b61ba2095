"""Resampling statistics over tasks: bootstrap intervals, Wilson intervals, the paired sign-flip test, TOST.

Every resampling function draws from a `numpy.random.Generator` seeded by the caller, and works in blocks of
at most `BOOTSTRAP_CHUNK_CELLS` resample cells so 10,000 resamples of 2,000 tasks stay within tens of MB.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import special

from sim_pipeline.defaults import (
    BOOTSTRAP_CHUNK_CELLS,
    BOOTSTRAP_RESAMPLES,
    CI_LEVEL,
    DELTA_CI_METHOD,
    FLOAT_TIE_RTOL,
    MIN_BOOTSTRAP_N,
    PERMUTATION_RESAMPLES,
    SIGN_FLIP_EXACT_MAX_N,
)
from sim_pipeline.errors import StatisticsError

# A statistic maps a (resamples, n) matrix to one value per row; strings name the built-in ones.
Statistic = Literal["mean", "median"] | Callable[..., np.ndarray]
_STATISTICS: dict[str, Callable[..., np.ndarray]] = {"mean": np.mean, "median": np.median}
# percentile and BCa work for any statistic; the two studentized (bootstrap-t) intervals are for the mean only.
IntervalMethod = Literal["percentile", "bca", "studentized", "studentized_symmetric"]
INTERVAL_METHODS: tuple[str, ...] = ("percentile", "bca", "studentized", "studentized_symmetric")
_UNBOUNDED = (-np.inf, np.inf)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its two-sided confidence interval."""

    estimate: float
    low: float
    high: float
    level: float
    n: int


def bootstrap_ci(
    values: ArrayLike,
    *,
    statistic: Statistic = "mean",
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = CI_LEVEL,
    method: IntervalMethod = "percentile",
    bounds: tuple[float, float] = _UNBOUNDED,
    seed: int = 0,
) -> Interval:
    """Bootstrap confidence interval of a statistic over independent units (tasks).

    Percentile interval (Efron & Tibshirani 1993, ch. 13), bias-corrected and accelerated interval (BCa, Efron
    1987), or for the mean the studentized (bootstrap-t) interval, equal-tailed (Efron & Tibshirani 1993, sec.
    12.5) or symmetric (Hall 1988). `bounds` is the range the statistic can take (e.g. (-1, 1) for a difference of
    rates): the interval is clipped to it, and a studentized interval the data cannot bound reaches it. NaN
    values are dropped; fewer than `MIN_BOOTSTRAP_N` values give a NaN interval.
    """
    stat = _resolve_statistic(statistic)
    _check_level(level)
    _check_resamples(n_resamples)
    if method not in INTERVAL_METHODS:
        raise StatisticsError(f"method={method!r} is not a bootstrap method; use one of {list(INTERVAL_METHODS)}.")
    studentized = method.startswith("studentized")
    if studentized and stat is not np.mean:
        raise StatisticsError(f"method={method!r} needs a standard error, which only statistic='mean' has here; "
                              "use 'percentile' or 'bca'.")
    lo_bound, hi_bound = bounds
    if not lo_bound < hi_bound:
        raise StatisticsError(f"bounds={bounds!r} must be (low, high) with low < high, e.g. (-1, 1).")
    data = _clean(values)
    n = data.size
    estimate = float(stat(data)) if n else float("nan")
    if n < MIN_BOOTSTRAP_N:
        return Interval(estimate, float("nan"), float("nan"), level, n)
    rng = np.random.default_rng(seed)
    if studentized:
        low, high = _studentized_interval(data, n_resamples, level, rng, symmetric=method.endswith("symmetric"))
    else:
        replicates = _bootstrap_replicates(data, stat, n_resamples, rng)
        alpha = (1.0 - level) / 2.0
        quantiles = np.array([alpha, 1.0 - alpha])
        if method == "bca":
            quantiles = _bca_quantiles(data, stat, estimate, replicates, quantiles)
            if not np.all(np.isfinite(quantiles)):
                return Interval(estimate, float("nan"), float("nan"), level, n)
        low, high = np.quantile(replicates, quantiles)
    return Interval(estimate, float(np.clip(low, lo_bound, hi_bound)), float(np.clip(high, lo_bound, hi_bound)),
                    level, n)


def paired_bootstrap_ci(
    differences: ArrayLike,
    *,
    n_resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = CI_LEVEL,
    method: IntervalMethod = DELTA_CI_METHOD,
    bounds: tuple[float, float] = _UNBOUNDED,
    seed: int = 0,
) -> Interval:
    """Bootstrap interval of the mean paired difference (after - before), resampling tasks (Efron 1979).

    The default method is `DELTA_CI_METHOD`, the one that held its coverage at small n in bench_coverage.
    """
    return bootstrap_ci(differences, statistic="mean", n_resamples=n_resamples, level=level, method=method,
                        bounds=bounds, seed=seed)


def equivalence_test(
    differences: ArrayLike, *, margin: float, n_resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> float:
    """TOST p-value that the mean difference lies inside (-margin, +margin) (Schuirmann 1987).

    The larger of the two one-sided p-values (H0: mean <= -margin, H0: mean >= +margin), each read off the
    symmetric studentized bootstrap distribution of |t| (Hall 1988), the same resamples as the
    'studentized_symmetric' interval with this seed: p < alpha/2 exactly when that (1 - alpha) interval lies
    inside the margin. NaN with fewer than `MIN_BOOTSTRAP_N` values or no spread (no scale to test on).
    """
    _check_resamples(n_resamples)
    if not (math.isfinite(margin) and margin > 0):
        raise StatisticsError(f"margin={margin!r} must be a positive finite difference, e.g. 0.05 of a rate.")
    data = _clean(differences)
    if data.size < MIN_BOOTSTRAP_N:
        return float("nan")
    estimate, se = _mean_and_se(data)
    if se == 0:
        return float("nan")
    abs_t = np.abs(_studentized_replicates(data, n_resamples, np.random.default_rng(seed)))
    # Standard errors from the estimate to the nearer margin; the farther margin's test has the smaller p.
    distance = (margin - abs(estimate)) / se
    total = n_resamples + 1
    if distance > 0:
        # P(T >= d) = P(|T| >= d) / 2 under the symmetric reference; +1 keeps p above 0 (Phipson & Smyth 2010).
        return (1 + int(np.count_nonzero(abs_t >= distance))) / total / 2.0
    return 1.0 - int(np.count_nonzero(abs_t > -distance)) / total / 2.0


def wilson_interval(
    successes: ArrayLike, n: ArrayLike, *, level: float = CI_LEVEL
) -> tuple[float | np.ndarray, float | np.ndarray]:
    """Wilson score interval for a binomial proportion (Wilson 1927); NaN where n == 0."""
    _check_level(level)
    k = np.asarray(successes, dtype=float)
    total = np.asarray(n, dtype=float)
    if np.any(k < 0) or np.any(k > total):
        raise StatisticsError(f"successes={successes!r} must lie in [0, n={n!r}]; count passes out of n trials.")
    z = special.ndtri(0.5 + level / 2.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / total
        denom = 1.0 + z * z / total
        centre = (p + z * z / (2.0 * total)) / denom
        half = z / denom * np.sqrt(p * (1.0 - p) / total + z * z / (4.0 * total * total))
    low = np.where(total > 0, np.clip(centre - half, 0.0, 1.0), np.nan)
    high = np.where(total > 0, np.clip(centre + half, 0.0, 1.0), np.nan)
    if low.ndim == 0:
        return float(low), float(high)
    return low, high


def holm_adjusted(p_values: ArrayLike) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979): family-wise error control over every finite p; NaN stays NaN.

    Sorted ascending, the i-th of m p-values becomes max over j <= i of min(1, (m - j + 1) p_j).
    """
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    tested = np.flatnonzero(np.isfinite(p))
    order = tested[np.argsort(p[tested], kind="stable")]
    m = order.size
    out[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    return out


def sign_flip_test(
    differences: ArrayLike, *, n_resamples: int = PERMUTATION_RESAMPLES, seed: int = 0
) -> float:
    """Two-sided paired sign-flip permutation p-value for mean difference zero (Fisher 1935; Good 2005).

    Exact by enumerating all 2^n sign vectors when n <= `SIGN_FLIP_EXACT_MAX_N`; otherwise `n_resamples`
    random flips with p = (b + 1) / (B + 1) (Phipson & Smyth 2010). NaN values are dropped; no data gives NaN.
    """
    _check_resamples(n_resamples)
    data = _clean(values=differences)
    n = data.size
    if n == 0:
        return float("nan")
    observed = abs(float(data.mean()))
    threshold = observed - FLOAT_TIE_RTOL * max(observed, float(np.abs(data).max()))
    if n <= SIGN_FLIP_EXACT_MAX_N:
        # Every sign vector's sum is a first-half sum plus a second-half sum: a 2^(n/2) x 2^(n/2) table holds all
        # 2^n of them without the 2^n x n sign matrix (~30x faster at n=16).
        half = n // 2
        means = (_signed_sums(data[:half])[:, None] + _signed_sums(data[half:])[None, :]) / n
        return float(np.mean(np.abs(means) >= threshold))
    rng = np.random.default_rng(seed)
    rows = _block_rows(n)
    extreme = 0
    for start in range(0, n_resamples, rows):
        size = min(rows, n_resamples - start)
        signs = 1.0 - 2.0 * rng.integers(0, 2, size=(size, n), dtype=np.int8)
        extreme += int(np.count_nonzero(np.abs(signs @ data / n) >= threshold))
    return (extreme + 1) / (n_resamples + 1)


def _signed_sums(values: np.ndarray) -> np.ndarray:
    """sum_i s_i * values_i for all 2^len(values) sign vectors s in {-1, +1}^len(values)."""
    bits = (np.arange(2**values.size)[:, None] >> np.arange(values.size)) & 1
    return (1.0 - 2.0 * bits) @ values


def _bootstrap_replicates(
    data: np.ndarray, stat: Callable[..., np.ndarray], n_resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """The statistic on `n_resamples` resamples with replacement, computed block by block."""
    n = data.size
    out = np.empty(n_resamples)
    rows = _block_rows(n)
    for start in range(0, n_resamples, rows):
        stop = min(start + rows, n_resamples)
        # 32-bit indices draw ~25% faster than the int64 default; task counts are far below 2^31.
        out[start:stop] = stat(data[rng.integers(0, n, size=(stop - start, n), dtype=np.int32)], axis=1)
    return out


def _studentized_interval(
    data: np.ndarray, n_resamples: int, level: float, rng: np.random.Generator, *, symmetric: bool
) -> tuple[float, float]:
    """Bootstrap-t interval of the mean: estimate - t* quantiles x the observed standard error.

    Symmetric: estimate +/- the `level` quantile of |t*| (Hall 1988); equal-tailed otherwise. All-equal data have
    no standard error, so the interval is the single value (zero width: the caller must not read it as certain).
    """
    estimate, se = _mean_and_se(data)
    if se == 0:
        return estimate, estimate
    t = _studentized_replicates(data, n_resamples, rng)
    if symmetric:
        half = _order_statistic(np.abs(t), level) * se
        return estimate - half, estimate + half
    alpha = (1.0 - level) / 2.0
    return estimate - _order_statistic(t, 1.0 - alpha) * se, estimate - _order_statistic(t, alpha) * se


def _studentized_replicates(data: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """t* = (mean* - mean) / se* of `n_resamples` resamples, computed block by block.

    A resample of one repeated value has no spread: its t* is 0 when that value is the estimate and +/-inf
    otherwise (a shift with no noise to measure it against), so a data set where such resamples are common gets
    a wide interval rather than a falsely narrow one.
    """
    n = data.size
    estimate = float(data.mean())
    tie = FLOAT_TIE_RTOL * max(1.0, float(np.abs(data).max()))
    out = np.empty(n_resamples)
    rows = _block_rows(n)
    for start in range(0, n_resamples, rows):
        stop = min(start + rows, n_resamples)
        resampled = data[rng.integers(0, n, size=(stop - start, n), dtype=np.int32)]
        means = resampled.mean(axis=1)
        ses = resampled.std(axis=1, ddof=1) / math.sqrt(n)
        shift = np.where(np.abs(means - estimate) <= tie, 0.0, means - estimate)
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(ses > tie, shift / np.where(ses > tie, ses, 1.0), np.sign(shift) * np.inf)
        out[start:stop] = np.nan_to_num(t, nan=0.0, posinf=np.inf, neginf=-np.inf)
    return out


def _mean_and_se(data: np.ndarray) -> tuple[float, float]:
    """Mean and standard error of the mean; the error is exactly 0 when the values differ only by rounding."""
    se = float(data.std(ddof=1)) / math.sqrt(data.size)
    tie = FLOAT_TIE_RTOL * max(1.0, float(np.abs(data).max()))
    return float(data.mean()), se if se > tie else 0.0


def _order_statistic(values: np.ndarray, level: float) -> float:
    """The ceil((B + 1) * level)-th smallest of B values (Efron & Tibshirani 1993, sec. 12.5), inf past the top."""
    # Shrunk by a rounding tolerance so an exact rank such as 1000 x 0.95 = 950 is not pushed up to 951.
    rank = math.ceil((values.size + 1) * level * (1.0 - FLOAT_TIE_RTOL))
    if rank > values.size:
        return float(np.inf)
    rank = max(rank, 1)
    return float(np.partition(values, rank - 1)[rank - 1])


def _bca_quantiles(
    data: np.ndarray,
    stat: Callable[..., np.ndarray],
    estimate: float,
    replicates: np.ndarray,
    quantiles: np.ndarray,
) -> np.ndarray:
    """BCa-adjusted quantile levels: bias from the replicates' mid-rank, acceleration from the jackknife."""
    # Mid-rank of the estimate among the replicates, so ties (e.g. 0/1 data) do not bias z0.
    below = np.count_nonzero(replicates < estimate) + np.count_nonzero(replicates <= estimate)
    z0 = special.ndtri(below / (2.0 * replicates.size))
    jack = _jackknife(data, stat)
    centred = jack.mean() - jack
    spread = np.sum(centred**2)
    accel = np.sum(centred**3) / (6.0 * spread**1.5) if spread > 0 else 0.0
    z = special.ndtri(quantiles)
    return special.ndtr(z0 + (z0 + z) / (1.0 - accel * (z0 + z)))


def _jackknife(data: np.ndarray, stat: Callable[..., np.ndarray]) -> np.ndarray:
    """Leave-one-out values of the statistic (closed form for the mean, blocks of rows otherwise)."""
    n = data.size
    if stat is np.mean:
        return (data.sum() - data) / (n - 1)
    out = np.empty(n)
    rows = _block_rows(n)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        keep = np.arange(n)[None, :] != np.arange(start, stop)[:, None]
        out[start:stop] = stat(np.broadcast_to(data, keep.shape)[keep].reshape(stop - start, n - 1), axis=1)
    return out


def _block_rows(n: int) -> int:
    """How many resample rows of n cells fit in one block."""
    return max(1, BOOTSTRAP_CHUNK_CELLS // max(n, 1))


def _clean(values: ArrayLike) -> np.ndarray:
    """A 1-D float array without NaN."""
    data = np.asarray(values, dtype=float).ravel()
    return data[~np.isnan(data)]


def _resolve_statistic(statistic: Statistic) -> Callable[..., np.ndarray]:
    """The numpy function behind a statistic name (a callable must accept `axis=`)."""
    if callable(statistic):
        return statistic
    if statistic not in _STATISTICS:
        raise StatisticsError(f"statistic={statistic!r} is unknown; use one of {sorted(_STATISTICS)} or a callable.")
    return _STATISTICS[statistic]


def _check_level(level: float) -> None:
    """Reject confidence levels outside (0, 1)."""
    if not 0.0 < level < 1.0:
        raise StatisticsError(f"level={level!r} must lie strictly between 0 and 1, e.g. 0.95.")


def _check_resamples(n_resamples: int) -> None:
    """Reject a non-positive number of resamples."""
    if n_resamples < 1:
        raise StatisticsError(f"n_resamples={n_resamples!r} must be at least 1; 10000 is the default.")
