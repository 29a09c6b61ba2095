"""The between-seed noise band: per-seed deltas, their spread, and what the delta report says about them."""

import math

import numpy as np
import pytest

from sim_pipeline.errors import StatisticsError
from sim_pipeline.measure.delta import delta_report
from sim_pipeline.measure.seeds import PER_SEED_COLUMNS, seed_spread

VERSIONS = {"baseline_version": "v1", "candidate_version": "v2"}


def _two_seeds(grades_builder):
    """20 tasks per seed; the candidate passes 1 of 4 samples on seed 0 and 3 of 4 on seed 1; the baseline none."""
    seeds = np.repeat([0, 1], 20)
    after = np.zeros((40, 4))
    after[:20, 0] = 1.0
    after[20:, :3] = 1.0
    return grades_builder("v1", np.zeros((40, 4)), seeds=seeds), grades_builder("v2", after, seeds=seeds)


def test_per_seed_deltas_and_spread(grades_builder) -> None:
    spread = seed_spread(*_two_seeds(grades_builder), **VERSIONS)
    assert tuple(spread.per_seed.columns) == PER_SEED_COLUMNS
    assert spread.per_seed["seed"].tolist() == ["0", "1"]
    np.testing.assert_allclose(spread.per_seed["delta"], [0.25, 0.75])
    assert spread.n_seeds == 2 and spread.per_seed["n_tasks"].tolist() == [20, 20]
    assert spread.mean == pytest.approx(0.5)
    assert spread.sd == pytest.approx(np.std([0.25, 0.75], ddof=1))
    assert (spread.low, spread.high) == (0.25, 0.75)
    assert spread.note.startswith("2 seeds")


def test_one_seed_says_so(grades_builder) -> None:
    baseline, candidate = _two_seeds(grades_builder)
    one = {"baseline": baseline[baseline["seed"] == 1], "candidate": candidate[candidate["seed"] == 1]}
    spread = seed_spread(one["baseline"], one["candidate"], **VERSIONS)
    assert spread.n_seeds == 1 and math.isnan(spread.sd)
    assert spread.note.startswith("only one seed (1): no between-seed noise band")
    report = delta_report(one["baseline"], one["candidate"], n_resamples=500, **VERSIONS).set_index("metric")
    assert (report["n_seeds"] == 1).all() and report["seed_sd"].isna().all()
    assert report["reason"].str.contains("only one seed").all()


def test_delta_report_carries_the_band(grades_builder) -> None:
    report = delta_report(*_two_seeds(grades_builder), n_resamples=500, **VERSIONS).set_index("metric")
    assert report.loc["pass@1", "n_seeds"] == 2
    assert report.loc["pass@1", "seed_sd"] == pytest.approx(np.std([0.25, 0.75], ddof=1))
    assert report.loc["pass@1", "delta"] == pytest.approx(0.5)  # pooled over seeds
    assert not report["reason"].str.contains("only one seed").any()


def test_pass_hat_k_and_errors(grades_builder) -> None:
    baseline, candidate = _two_seeds(grades_builder)
    hat = seed_spread(baseline, candidate, metric="pass^4", **VERSIONS)
    np.testing.assert_allclose(hat.per_seed["delta"], [0.0, 0.0])  # nobody passes all 4
    with pytest.raises(StatisticsError, match="metric='marker_refusal'"):
        seed_spread(baseline, candidate, metric="marker_refusal", **VERSIONS)
    empty = seed_spread(baseline.assign(split="train"), candidate, **VERSIONS)
    assert empty.n_seeds == 0 and math.isnan(empty.mean) and empty.note.startswith("no paired")
