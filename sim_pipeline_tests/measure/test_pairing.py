"""Pairing baseline and candidate by task: the per-task differences table and its context columns."""

import numpy as np
import pytest

from sim_pipeline.errors import StatisticsError
from sim_pipeline.measure.pairing import DIFFERENCE_COLUMNS, pair_tasks, paired_differences

VERSIONS = {"baseline_version": "v1", "candidate_version": "v2"}


def test_paired_differences_hand_worked(grades_builder) -> None:
    before = np.array([[1, 0], [0, 0], [1, 1]])
    after = np.array([[1, 1], [1, 0], [1, 1], [0, 0]])  # task s3 is candidate-only: not paired
    table = paired_differences(grades_builder("v1", before, seeds=[0, 1, 1]),
                               grades_builder("v2", after, seeds=[0, 1, 1, 1]), **VERSIONS)
    assert tuple(table.columns) == DIFFERENCE_COLUMNS
    pass1 = table.loc[table["metric"] == "pass@1"].set_index("situation_id")
    assert pass1["difference"].to_dict() == {"s0": 0.5, "s1": 0.5, "s2": 0.0}
    assert pass1["seed"].to_dict() == {"s0": "0", "s1": "1", "s2": "1"}
    assert pass1.loc["s1", "tool"] == "cancel_order" and pass1.loc["s2", "tool_condition"] == "success"
    # k = 2: pass^2 is 1 only when both samples pass; pass@2 when either does.
    hat = table.loc[table["metric"] == "pass^2"].set_index("situation_id")["difference"].to_dict()
    assert hat == {"s0": 1.0, "s1": 0.0, "s2": 0.0}
    assert set(table["metric"]) == {"pass@1", "pass^2", "pass@2", "marker_refusal"}


def test_unjudged_rows_are_left_out(grades_builder) -> None:
    # An unjudged rollout (reward NaN) is neither a pass nor a fail: task s0 counts 1 of 1, not 1 of 2.
    before = grades_builder("v1", np.array([[0, 0], [0, 0]]))
    after = grades_builder("v2", np.array([[1, np.nan], [0, 1]]))
    paired = pair_tasks(before, after, **VERSIONS)
    # k is what most tasks have (2), not the fewest: one lost sample leaves its task out of pass^2 only.
    assert paired.k == 2 and paired.ungraded_tasks == 0
    assert paired.after["pass@1"].to_dict() == {"s0": 1.0, "s1": 0.5}
    assert np.isnan(paired.after.loc["s0", "pass^2"]) and paired.after.loc["s1", "pass^2"] == 0.0


def test_tasks_whose_samples_all_errored_leave_the_pairing_and_are_counted(grades_builder) -> None:
    before = grades_builder("v1", np.zeros((3, 2)))
    after = grades_builder("v2", np.array([[np.nan, np.nan], [1, 1], [0, 1]]))
    paired = pair_tasks(before, after, **VERSIONS)
    assert paired.ungraded_tasks == 1 and list(paired.after.index) == ["s1", "s2"]
    nothing = grades_builder("v2", np.full((3, 2), np.nan))
    blocked = pair_tasks(before, nothing, **VERSIONS)
    assert blocked.ungraded_tasks == 3 and "no graded held-out rows" in blocked.blocked[1]


def test_a_side_with_nothing_graded_is_told_what_to_fix_from_how_it_errored(grades_builder) -> None:
    before = grades_builder("v1", np.zeros((3, 2)))
    nothing = grades_builder("v2", np.full((3, 2), np.nan))
    user_off_protocol = pair_tasks(before, nothing.assign(status="user_error"), **VERSIONS).blocked[1]
    assert "simulated user's model" in user_off_protocol and "agent's model endpoint" not in user_off_protocol
    mixed = nothing.assign(status=["provider_error"] * 4 + ["user_error"] * 2)
    reason = pair_tasks(before, mixed, **VERSIONS).blocked[1]
    assert reason.index("agent's model endpoint") < reason.index("simulated user's model")  # most frequent first


def test_tasks_missing_a_metric_are_dropped(grades_builder) -> None:
    rewards = np.ones((4, 3))
    table = paired_differences(grades_builder("v1", rewards), grades_builder("v2", rewards), k=4, **VERSIONS)
    assert set(table["metric"]) == {"pass@1", "marker_refusal"}  # nobody has 4 samples: pass@4 undefined


def test_missing_seed_column_gives_nan_seed(grades_builder) -> None:
    grades = grades_builder("v1", np.ones((3, 2))).drop(columns="seed")
    table = paired_differences(grades, grades.assign(policy_version="v2"), **VERSIONS)
    assert table["seed"].isna().all() and len(table) == 3 * 4


def test_empty_pairing_has_the_columns(grades_builder) -> None:
    grades = grades_builder("v1", np.ones((3, 2)))
    table = paired_differences(grades, grades.assign(policy_version="v2", split="train"), **VERSIONS)
    assert tuple(table.columns) == DIFFERENCE_COLUMNS and not len(table)
    assert pair_tasks(grades, grades.assign(policy_version="v2", split="train"), **VERSIONS).blocked[0] == \
        "INSUFFICIENT DATA"
    with pytest.raises(StatisticsError, match=r"baseline grades lack column\(s\) \['reward'\]"):
        paired_differences(grades.drop(columns="reward"), grades, **VERSIONS)
