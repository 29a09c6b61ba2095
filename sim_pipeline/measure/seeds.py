"""The between-seed noise band: the paired delta computed seed by seed, and how much it moves between seeds."""

from dataclasses import dataclass

import numpy as np
import pandas as pd

from sim_pipeline.errors import StatisticsError
from sim_pipeline.measure.pairing import paired_differences

PER_SEED_COLUMNS: tuple[str, ...] = ("metric", "seed", "n_tasks", "before", "after", "delta")
UNKNOWN_SEED = "unknown"  # label for rows whose table has no seed column


@dataclass(frozen=True)
class SeedSpread:
    """Per-seed deltas of one metric and their spread; `sd` is NaN (and `note` says so) with fewer than 2 seeds."""

    metric: str
    per_seed: pd.DataFrame  # PER_SEED_COLUMNS, one row per seed
    n_seeds: int
    mean: float
    sd: float
    low: float
    high: float
    note: str


def seed_spread(
    baseline: pd.DataFrame,
    candidate: pd.DataFrame,
    *,
    baseline_version: str,
    candidate_version: str,
    metric: str = "pass@1",
    k: int | None = None,
) -> SeedSpread:
    """The paired delta of `metric` within each seed, with the between-seed standard deviation and range.

    Seeds are independent replications of the whole pipeline (situations, world, rollouts), so the spread of
    per-seed deltas is an empirical noise band for a one-seed comparison (Dror et al. 2019, "Deep Dominance";
    Bouthillier et al. 2021, "Accounting for Variance in Machine Learning Benchmarks").
    """
    differences = paired_differences(baseline, candidate, baseline_version=baseline_version,
                                     candidate_version=candidate_version, k=k, markers={})
    metrics = sorted(set(differences["metric"]))
    if metrics and metric not in metrics:
        raise StatisticsError(f"metric={metric!r} is not among the paired metrics {metrics}; pick one of them.")
    return spread_of(per_seed_deltas(differences), metric)


def per_seed_deltas(differences: pd.DataFrame) -> pd.DataFrame:
    """Mean before, after and difference per (metric, seed) of a `paired_differences` table."""
    if not len(differences):
        return pd.DataFrame(columns=list(PER_SEED_COLUMNS))
    frame = differences.assign(seed=differences["seed"].fillna(UNKNOWN_SEED).astype(str))
    grouped = frame.groupby(["metric", "seed"], sort=True)
    out = grouped.agg(n_tasks=("difference", "size"), before=("before", "mean"), after=("after", "mean"),
                      delta=("difference", "mean")).reset_index()
    return out.loc[:, list(PER_SEED_COLUMNS)]


def spread_of(per_seed: pd.DataFrame, metric: str) -> SeedSpread:
    """The `SeedSpread` of one metric from a `per_seed_deltas` table."""
    rows = per_seed.loc[per_seed["metric"] == metric].reset_index(drop=True)
    deltas = rows["delta"].to_numpy(dtype=float)
    n = deltas.size
    nan = float("nan")
    if n == 0:
        note = "no paired held-out tasks: no per-seed delta."
    elif n == 1:
        note = (f"only one seed ({rows['seed'].iloc[0]}): no between-seed noise band; materialize more seed "
                "partitions of both versions.")
    else:
        note = f"{n} seeds: per-seed delta {deltas.mean():+.3f} +/- {deltas.std(ddof=1):.3f} (SD)."
    return SeedSpread(
        metric=metric, per_seed=rows, n_seeds=n, mean=float(deltas.mean()) if n else nan,
        sd=float(np.std(deltas, ddof=1)) if n >= 2 else nan,
        low=float(deltas.min()) if n else nan, high=float(deltas.max()) if n else nan, note=note,
    )
