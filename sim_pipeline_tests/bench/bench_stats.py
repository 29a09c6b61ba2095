"""Our bootstrap and sign-flip test vs scipy's on 2,000 tasks x 10,000 resamples: time and peak memory."""

import statistics
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
from scipy import stats as sps

from sim_pipeline.measure.stats import bootstrap_ci, sign_flip_test

N_TASKS = 2000
N_RESAMPLES = 10_000
REPEATS = 3


def _seconds(call: Callable[[], object]) -> float:
    """Median wall time of a few calls (the machine is shared, so one call is noisy)."""
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _peak_mb(call: Callable[[], object]) -> float:
    """Peak traced allocation of one call, in MB."""
    tracemalloc.start()
    call()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 1e6


def _figure(name: str, ours: float, baseline_name: str, theirs: float, unit: str) -> dict:
    return {"name": name, "value": ours, "unit": unit, "baseline_name": baseline_name, "baseline_value": theirs,
            "ratio": ours / theirs}


def figures() -> list[dict]:
    """Time and memory of our statistics against scipy on the same per-task differences."""
    diffs = np.random.default_rng(0).normal(0.02, 0.4, size=N_TASKS)
    pairs = {
        "bootstrap percentile": (
            lambda: bootstrap_ci(diffs, n_resamples=N_RESAMPLES, seed=1),
            lambda: sps.bootstrap((diffs,), np.mean, method="percentile", n_resamples=N_RESAMPLES,
                                  rng=np.random.default_rng(1)),
        ),
        "bootstrap BCa": (
            lambda: bootstrap_ci(diffs, n_resamples=N_RESAMPLES, method="bca", seed=1),
            lambda: sps.bootstrap((diffs,), np.mean, method="BCa", n_resamples=N_RESAMPLES,
                                  rng=np.random.default_rng(1)),
        ),
        "sign-flip permutation": (
            lambda: sign_flip_test(diffs, n_resamples=N_RESAMPLES, seed=1),
            lambda: sps.permutation_test((diffs,), np.mean, permutation_type="samples", n_resamples=N_RESAMPLES,
                                         vectorized=True, rng=np.random.default_rng(1)),
        ),
    }
    out = []
    for label, (ours, theirs) in pairs.items():
        out.append(_figure(f"stats {label} time, {N_TASKS} tasks", _seconds(ours), f"scipy {label}",
                           _seconds(theirs), "s"))
        out.append(_figure(f"stats {label} peak memory", _peak_mb(ours), f"scipy {label}", _peak_mb(theirs),
                           "MB"))
    return out
