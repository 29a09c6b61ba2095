"""Slices of the paired delta by axis value: a planted per-slice effect is found where it is and nowhere else."""

import numpy as np
import pandas as pd
import pytest

from sim_pipeline.axes import AXIS_NAMES
from sim_pipeline.defaults import MIN_TASKS_FOR_VERDICT
from sim_pipeline.errors import StatisticsError
from sim_pipeline.measure.pairing import paired_differences
from sim_pipeline.measure.slices import SLICE_COLUMNS, delta_slices

VERSIONS = {"baseline_version": "v1", "candidate_version": "v2"}
RESAMPLES = 2000


def _planted(grades_builder, n_tasks: int = 60) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The candidate equals the baseline except on tool_condition=timeout tasks (odd t), where it passes more."""
    rng = np.random.default_rng(11)
    before = (rng.random((n_tasks, 4)) < 0.2).astype(float)
    after = before.copy()
    timeout = np.arange(n_tasks) % 2 == 1
    after[timeout] = (rng.random((int(timeout.sum()), 4)) < 0.9).astype(float)
    return grades_builder("v1", before), grades_builder("v2", after)


def test_planted_slice_effect(grades_builder) -> None:
    table = delta_slices(*_planted(grades_builder), n_resamples=RESAMPLES, **VERSIONS)
    assert tuple(table.columns) == SLICE_COLUMNS
    by_slice = table.set_index(["axis", "value"])
    assert by_slice.loc[("tool_condition", "timeout"), "verdict"] == "PASS"
    assert by_slice.loc[("tool_condition", "timeout"), "q_value"] < 0.05
    # Untouched tasks differ by exactly 0: a zero-width interval, INCONCLUSIVE rather than NO DIFFERENCE.
    assert by_slice.loc[("tool_condition", "success"), "verdict"] == "INCONCLUSIVE"
    assert by_slice.loc[("tool_condition", "success"), "p_value"] == 1.0
    assert by_slice.loc[("tool_condition", "success"), "delta"] == 0.0
    assert set(table["axis"]) == set(AXIS_NAMES)
    assert (table.groupby("axis")["n_tasks"].sum() == 60).all()  # every task in exactly one slice per axis


def test_slice_numbers_match_the_paired_differences(grades_builder) -> None:
    baseline, candidate = _planted(grades_builder)
    table = delta_slices(baseline, candidate, axes=("stance",), n_resamples=RESAMPLES, **VERSIONS)
    diffs = paired_differences(baseline, candidate, **VERSIONS)
    expected = diffs.loc[diffs["metric"] == "pass@1"].groupby("stance")["difference"].agg(["mean", "size"])
    got = table.set_index("value")
    np.testing.assert_allclose(got.loc[expected.index, "delta"], expected["mean"])
    assert (got.loc[expected.index, "n_tasks"] == expected["size"]).all()
    tested = table.dropna(subset=["p_value"])
    assert (tested["q_value"] >= tested["p_value"] - 1e-12).all()  # BH never lowers a p-value


def test_slices_below_the_verdict_minimum_show_numbers_but_no_verdict(grades_builder) -> None:
    # 12 tasks per stance: tested (>= DELTA_SLICE_MIN_TASKS) but below MIN_TASKS_FOR_VERDICT.
    table = delta_slices(*_planted(grades_builder), axes=("stance",), n_resamples=RESAMPLES, **VERSIONS)
    assert (table["n_tasks"] == 12).all() and 12 < MIN_TASKS_FOR_VERDICT
    assert set(table["verdict"]) == {"INCONCLUSIVE"}
    assert table["delta"].notna().all() and table["ci_low"].notna().all() and table["q_value"].notna().all()


def test_small_slices_are_insufficient(grades_builder) -> None:
    table = delta_slices(*_planted(grades_builder), axes=("stance",), min_tasks=13, n_resamples=RESAMPLES,
                         **VERSIONS)
    assert set(table["verdict"]) == {"INSUFFICIENT DATA"}  # 12 tasks per stance
    assert table["reason"].iloc[0] == "only 12 paired tasks in this slice; need 13."
    assert table["q_value"].isna().all() and table["delta"].isna().all()


def test_other_metrics_and_blocked_comparisons(grades_builder) -> None:
    baseline, candidate = _planted(grades_builder)
    hat = delta_slices(baseline, candidate, axes=("tool_condition",), metric="pass^4", n_resamples=RESAMPLES,
                       **VERSIONS)
    assert set(hat["metric"]) == {"pass^4"}
    refusal = delta_slices(baseline, candidate, axes=("tool",), metric="marker_refusal", n_resamples=RESAMPLES,
                           **VERSIONS)
    assert set(refusal["verdict"]) == {"INCONCLUSIVE"}  # refusal is 0 everywhere: zero-width intervals
    assert (refusal["delta"] == 0).all()
    other_judge = candidate.assign(judge_version="sim/judge@ffffff")
    blocked = delta_slices(baseline, other_judge, axes=("tool",), n_resamples=RESAMPLES, **VERSIONS)
    assert set(blocked["verdict"]) == {"NOT COMPARABLE"}
    assert blocked["reason"].str.contains("judge versions differ").all()


def test_invalid_options_raise(grades_builder) -> None:
    baseline, candidate = _planted(grades_builder)
    with pytest.raises(StatisticsError, match=r"axes \['colour'\]"):
        delta_slices(baseline, candidate, axes=("colour",), **VERSIONS)
    with pytest.raises(StatisticsError, match="metric='pass@9'"):
        delta_slices(baseline, candidate, metric="pass@9", **VERSIONS)
    with pytest.raises(StatisticsError, match="min_tasks=0"):
        delta_slices(baseline, candidate, min_tasks=0, **VERSIONS)
