"""Reward-hack scan: a planted within-task length hack is flagged; honest data and between-task confounds are not."""

import numpy as np
import pandas as pd
import pytest

from sim_pipeline.errors import StatisticsError
from sim_pipeline.measure.hack_scan import FEATURES, SCAN_COLUMNS, hack_scan, rollout_features


def _tables(reward_of: str, *, n_tasks: int = 60, samples: int = 6, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Grades and rollouts; `reward_of` is 'length' (planted hack), 'noise' (no link) or 'task' (between only)."""
    rng = np.random.default_rng(seed)
    task = np.repeat(np.arange(n_tasks), samples)
    difficulty = rng.normal(0, 1, n_tasks)[task]
    task_length = 300 + 150 * difficulty  # harder tasks get longer replies and higher reward between tasks
    length = np.maximum(1, task_length + rng.normal(0, 60, task.size)).astype(int)
    if reward_of == "length":
        logit = 2.5 * (length - task_length) / 60
    elif reward_of == "task":
        logit = 3.0 * difficulty + 0 * length
    else:
        logit = np.zeros(task.size)
    reward = (rng.random(task.size) < 1 / (1 + np.exp(-logit))).astype(float)
    if reward_of == "task":  # no within-task spread: every rollout of a task gets its first draw
        reward = reward.reshape(n_tasks, samples)[:, :1].repeat(samples, axis=1).ravel()
    ids = [f"r{i}" for i in range(task.size)]
    grades = pd.DataFrame({"rollout_id": ids, "situation_id": [f"s{t}" for t in task], "reward": reward})
    n_calls = rng.integers(0, 4, task.size)
    rollouts = pd.DataFrame({
        "rollout_id": ids,
        "final_text": ["x" * n for n in length],
        "messages": [[{"role": "assistant", "content": "ok"}] for _ in ids],
        "n_turns": rng.integers(1, 5, task.size),
        "logprob": rng.normal(-5, 1, task.size), "n_tokens": rng.integers(5, 50, task.size),
        "tool_events": [[{"tool": "get_order", "status": "ok"}] * c for c in n_calls],
    })
    return grades, rollouts


def test_planted_length_hack_is_flagged() -> None:
    scan, table = hack_scan(*_tables("length"))
    assert tuple(table.columns) == SCAN_COLUMNS and tuple(table["feature"]) == FEATURES
    assert scan.top_feature == "reply_chars" and scan.top_correlation > 0.3
    assert "reply_chars" in scan.flagged and scan.top_correlation > scan.floor
    assert table.set_index("feature").loc["reply_chars", "flagged"]
    assert "reply_chars" in scan.note


def test_no_planted_feature_is_not_flagged() -> None:
    scan, table = hack_scan(*_tables("noise"))
    assert scan.flagged == () and not table["flagged"].any()
    assert 0 < scan.floor < 0.3 and "no feature" in scan.note


def test_false_flag_rate_is_about_five_percent() -> None:
    # The floor is the 95th percentile of the shuffled top |correlation|: on data with no link, about 5% of scans
    # flag something. 100 null data sets: binomial SD ~2.2 points.
    flags = [bool(hack_scan(*_tables("noise", n_tasks=30, seed=100 + rep), seed=rep)[0].flagged) for rep in range(100)]
    assert 0.0 < np.mean(flags) <= 0.12


def test_correlations_match_a_pandas_reference() -> None:
    grades, rollouts = _tables("length", n_tasks=15, seed=4)
    _, table = hack_scan(grades, rollouts, n_permutations=10)
    joined = grades.merge(rollout_features(rollouts), on="rollout_id")

    def centre(col):
        return joined[col] - joined.groupby("situation_id")[col].transform("mean")

    for feature in ("reply_chars", "tool_calls", "turns", "mean_token_logprob", "tools_used"):
        expected = np.corrcoef(centre("reward"), centre(feature))[0, 1]
        assert table.set_index("feature").loc[feature, "correlation"] == pytest.approx(expected, abs=1e-12)


def test_between_task_correlation_is_not_a_hack() -> None:
    grades, rollouts = _tables("task")
    raw = np.corrcoef(grades["reward"], rollouts["final_text"].str.len())[0, 1]
    assert raw > 0.3  # long replies and high reward go together, but only across tasks
    scan, table = hack_scan(grades, rollouts)
    assert scan.flagged == () and table["correlation"].isna().all()
    assert scan.within_task_variance == 0 and scan.between_task_variance > 0
    assert "nothing to scan" in scan.note


def test_variance_decomposition_hand_worked() -> None:
    # Task a: rewards 1, 0 (mean 0.5); task b: 1, 1. Overall mean 0.75, Var(r) = 0.1875;
    # E[Var(r|task)] = (0.25 + 0.25 + 0 + 0) / 4 = 0.125; Var(E[r|task]) = 4 * 0.0625 / 4 = 0.0625.
    grades = pd.DataFrame({"rollout_id": ["1", "2", "3", "4"], "situation_id": ["a", "a", "b", "b"],
                           "reward": [1.0, 0.0, 1.0, 1.0]})
    rollouts = pd.DataFrame({"rollout_id": ["1", "2", "3", "4"], "final_text": ["long reply", "no", "x", "y"]})
    scan, table = hack_scan(grades, rollouts, n_permutations=10)
    assert (scan.total_variance, scan.within_task_variance, scan.between_task_variance) == pytest.approx(
        (0.1875, 0.125, 0.0625))
    assert scan.n_rollouts == 4 and scan.n_tasks == 2
    # Within task a the longer reply got the reward; task b has no spread: correlation is exactly 1.
    assert table.set_index("feature").loc["reply_chars", "correlation"] == pytest.approx(1.0)
    assert table.set_index("feature").loc["turns", "n_rollouts"] == 0  # no n_turns column: skipped


def test_rollout_features_hand_worked() -> None:
    rollouts = pd.DataFrame({
        "rollout_id": ["r1", "r2"],
        "final_text": ["Done! Your order has been cancelled successfully.", None],
        "messages": [
            [{"role": "user", "content": "done?"}, {"role": "assistant", "content": None},
             {"role": "assistant", "content": "Done! Your order has been cancelled successfully."}],
            None,
        ],
        "n_turns": [2, 1], "logprob": [-2.0, -1.0], "n_tokens": [4, 0],
        "tool_events": [[{"tool": "cancel_order", "status": "ok"}, {"tool": "cancel_order", "status": "ok"},
                         {"tool": "get_order", "status": "ok"}], None],
    })
    features = rollout_features(rollouts).set_index("rollout_id")
    assert features.loc["r1"].to_dict() == {"reply_chars": 49, "tool_calls": 3, "turns": 2, "success_claims": 3,
                                            "mean_token_logprob": -0.5, "tools_used": 2}
    assert features.loc["r2", "reply_chars"] == 0 and features.loc["r2", "tool_calls"] == 0
    assert np.isnan(features.loc["r2", "mean_token_logprob"])  # no tokens: undefined, not 0


def test_seeded_and_order_free() -> None:
    grades, rollouts = _tables("length", n_tasks=20)
    first, table = hack_scan(grades, rollouts, seed=3)
    again, table_again = hack_scan(grades.sample(frac=1.0, random_state=1), rollouts[::-1], seed=3)
    assert first == again
    pd.testing.assert_frame_equal(table, table_again)


def test_errors() -> None:
    grades, rollouts = _tables("noise", n_tasks=5)
    with pytest.raises(StatisticsError, match=r"grades lack column\(s\) \['reward'\]"):
        hack_scan(grades.drop(columns="reward"), rollouts)
    with pytest.raises(StatisticsError, match="no graded rollout_id matches"):
        hack_scan(grades.assign(rollout_id="other"), rollouts)
    with pytest.raises(StatisticsError, match="quantile=1.5"):
        hack_scan(grades, rollouts, quantile=1.5)
    with pytest.raises(StatisticsError, match="n_permutations=0"):
        hack_scan(grades, rollouts, n_permutations=0)
    with pytest.raises(StatisticsError, match="lacks column 'rollout_id'"):
        rollout_features(rollouts.drop(columns="rollout_id"))


def test_empty_tables_give_an_empty_scan() -> None:
    grades, rollouts = _tables("noise", n_tasks=3)
    scan, table = hack_scan(grades.iloc[:0], rollouts.iloc[:0])
    assert scan.n_rollouts == 0 and scan.flagged == () and scan.top_feature is None
    assert scan.note == "no graded rollouts to scan." and table["correlation"].isna().all()


def test_rounding_residue_is_not_variance() -> None:
    # Each task's three rollouts share one mean logprob, but 0.1-style values do not average back exactly.
    grades, rollouts = _tables("length", n_tasks=10, samples=3)
    task_logprob = np.repeat(np.linspace(-0.7, -0.1, 10), 3)
    rollouts = rollouts.assign(logprob=task_logprob * 7.0, n_tokens=7)
    _, table = hack_scan(grades, rollouts, n_permutations=10)
    assert np.isnan(table.set_index("feature").loc["mean_token_logprob", "correlation"])
