"""pass@k and pass^k estimators against hand-worked values and the binomial-coefficient definitions."""

from fractions import Fraction
from math import comb

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_pipeline.errors import StatisticsError
from sim_pipeline.measure.passat import (
    CURVE_COLUMNS,
    SCORE_COLUMNS,
    metric_names,
    pass_at_k,
    pass_curve,
    pass_hat_k,
    score_table,
    task_counts,
    task_scores,
)
from sim_pipeline.measure.stats import bootstrap_ci


@pytest.mark.parametrize(
    ("n", "c", "k", "at_k", "hat_k"),
    [
        (5, 2, 2, 0.7, 0.1),  # 1 - C(3,2)/C(5,2) = 1 - 3/10; C(2,2)/C(5,2) = 1/10
        (10, 3, 5, 1 - 21 / 252, 0.0),  # C(7,5)=21, C(10,5)=252; fewer passes than k: pass^k = 0
        (10, 3, 3, 1 - 35 / 120, 1 / 120),  # C(7,3)=35, C(10,3)=120
        (4, 4, 4, 1.0, 1.0),
        (4, 0, 2, 0.0, 0.0),
        (4, 3, 2, 1.0, 0.5),  # one failure cannot fill a pair: pass@2 = 1; C(3,2)/C(4,2) = 3/6
        (8, 5, 1, 5 / 8, 5 / 8),  # k = 1: both are c/n
    ],
)
def test_hand_worked_values(n: int, c: int, k: int, at_k: float, hat_k: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(at_k, abs=1e-12)
    assert pass_hat_k(n, c, k) == pytest.approx(hat_k, abs=1e-12)


def test_matches_binomial_definitions_on_a_grid() -> None:
    grid = [(n, c, k) for n in range(1, 13) for c in range(n + 1) for k in range(1, n + 1)]
    n, c, k = (np.array(col) for col in zip(*grid, strict=True))
    at_k = np.array([1 - comb(a - b, kk) / comb(a, kk) for a, b, kk in grid])
    hat_k = np.array([comb(b, kk) / comb(a, kk) for a, b, kk in grid])
    np.testing.assert_allclose(pass_at_k(n, c, k), at_k, atol=1e-12)
    np.testing.assert_allclose(pass_hat_k(n, c, k), hat_k, atol=1e-12)


def test_large_n_is_stable() -> None:
    # C(10000, 100) overflows float64; the product form does not.
    exact_at = 1 - Fraction(comb(5000, 100), comb(10000, 100))
    exact_hat = Fraction(comb(5000, 100), comb(10000, 100))
    assert pass_at_k(10000, 5000, 100) == pytest.approx(float(exact_at), rel=1e-12)
    assert pass_hat_k(10000, 5000, 100) == pytest.approx(float(exact_hat), rel=1e-9)


def test_shapes_and_undefined_values() -> None:
    assert isinstance(pass_at_k(5, 2, 2), float)
    out = pass_at_k(np.array([[5, 1], [3, 4]]), np.array([[2, 1], [0, 4]]), 2)
    assert out.shape == (2, 2) and np.isnan(out[0, 1])  # n = 1 < k = 2
    assert np.isnan(pass_hat_k(1, 1, 2))
    assert pass_at_k(np.array([], dtype=int), np.array([], dtype=int), 3).shape == (0,)


@pytest.mark.parametrize(("n", "c", "k", "match"), [(3, 4, 1, "c="), (3, -1, 1, "c="), (3, 1, 0, "k="),
                                                    (3.5, 1, 1, "n=")])
def test_invalid_counts_raise(n: float, c: int, k: int, match: str) -> None:
    with pytest.raises(StatisticsError, match=match):
        pass_at_k(n, c, k)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 40).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_ordering_pass_hat_le_pass1_le_pass_at(nck: tuple[int, int, int]) -> None:
    n, c, k = nck
    eps = 1e-12
    assert 0.0 <= pass_hat_k(n, c, k) <= c / n + eps <= pass_at_k(n, c, k) + 2 * eps <= 1.0 + 3 * eps
    if c < n:  # one more pass never lowers either estimator
        assert pass_at_k(n, c + 1, k) >= pass_at_k(n, c, k) - eps
        assert pass_hat_k(n, c + 1, k) >= pass_hat_k(n, c, k) - eps


def _grades(rewards_by_task: dict[str, list[float]]) -> pd.DataFrame:
    rows = [{"situation_id": sid, "reward": r} for sid, rewards in rewards_by_task.items() for r in rewards]
    return pd.DataFrame(rows, columns=["situation_id", "reward"])


def test_task_counts_counts_only_full_credit() -> None:
    counts = task_counts(_grades({"b": [1.0, 0.5, 0.0], "a": [1.0, 1.0]}))
    assert counts.to_dict("list") == {"situation_id": ["a", "b"], "n": [2, 3], "c": [2, 1]}


def test_task_counts_requires_columns() -> None:
    with pytest.raises(StatisticsError, match=r"lacks column\(s\) \['reward'\]"):
        task_counts(pd.DataFrame({"situation_id": ["a"]}))


def test_score_table_hand_worked() -> None:
    # Task a: 3/4 pass, b: 1/4, c: 4/4. pass@1 = mean(0.75, 0.25, 1) = 2/3.
    # pass^4 = mean(0, 0, 1) = 1/3; pass@4 = mean(1, 1, 1) = 1.
    grades = _grades({"a": [1, 1, 1, 0], "b": [0, 0, 1, 0.5], "c": [1, 1, 1, 1]})
    table = score_table(grades, seed=0, n_resamples=500)
    assert tuple(table.columns) == SCORE_COLUMNS
    assert list(table["metric"]) == ["pass@1", "pass^4", "pass@4"]
    np.testing.assert_allclose(table["value"], [2 / 3, 1 / 3, 1.0])
    assert list(table["n_tasks"]) == [3, 3, 3] and list(table["n_rollouts"]) == [12, 12, 12]


def test_score_table_excludes_tasks_with_fewer_than_k_samples() -> None:
    grades = _grades({"a": [1, 0, 1], "b": [1], "c": [0, 0, 0]})
    table = score_table(grades, k=3, n_resamples=200).set_index("metric")
    assert table.loc["pass@1", "n_tasks"] == 3 and table.loc["pass@1", "n_rollouts"] == 7
    assert table.loc["pass@3", "n_tasks"] == 2 and table.loc["pass@3", "n_rollouts"] == 6
    assert table.loc["pass^3", "value"] == 0.0
    # Default k is what most tasks have (3), so one short task does not turn pass^3 into pass^1 for all.
    assert score_table(grades, n_resamples=200)["metric"].tolist() == ["pass@1", "pass^3", "pass@3"]


def test_score_table_bootstraps_tasks_not_rollouts() -> None:
    # One task with 200 rollouts: resampling rollouts would give a narrow interval; over tasks there is none.
    one_task = score_table(_grades({"a": [1.0, 0.0] * 100}), n_resamples=200)
    assert one_task["ci_low"].isna().all()
    rng = np.random.default_rng(0)
    many = {f"t{i}": list(rng.integers(0, 2, size=4).astype(float)) for i in range(30)}
    table = score_table(_grades(many), seed=5, n_resamples=1000).set_index("metric")
    per_task = task_scores(task_counts(_grades(many)), k=4)
    expected = bootstrap_ci(per_task["pass@4"], seed=5, n_resamples=1000)
    assert (table.loc["pass@4", "ci_low"], table.loc["pass@4", "ci_high"]) == (expected.low, expected.high)


def test_metric_names() -> None:
    assert metric_names(1) == ("pass@1",)
    assert metric_names(8) == ("pass@1", "pass^8", "pass@8")
    with pytest.raises(StatisticsError, match="k=0"):
        metric_names(0)


def test_pass_curve_hand_worked() -> None:
    # Passes 3, 1, 4 of 4 per task. pass@2: (1 + (1 - 3/6) + 1) / 3; pass^2: (3/6 + 0 + 1) / 3;
    # pass@3: (1 + (1 - 1/4) + 1) / 3; pass^3: (1/4 + 0 + 1) / 3; k=4 as in score_table.
    grades = _grades({"a": [1, 1, 1, 0], "b": [0, 0, 1, 0.5], "c": [1, 1, 1, 1]})
    curve = pass_curve(grades, n_resamples=200)
    assert tuple(curve.columns) == CURVE_COLUMNS and curve["k"].tolist() == [1, 1, 2, 2, 3, 3, 4, 4]
    values = curve.set_index(["k", "metric"])["value"]
    expected = {(1, "pass@k"): 2 / 3, (1, "pass^k"): 2 / 3, (2, "pass@k"): 2.5 / 3, (2, "pass^k"): 0.5,
                (3, "pass@k"): 2.75 / 3, (3, "pass^k"): 1.25 / 3, (4, "pass@k"): 1.0, (4, "pass^k"): 1 / 3}
    for key, value in expected.items():
        assert values[key] == pytest.approx(value, abs=1e-12)
    assert (curve["n_tasks"] == 3).all()
    assert (curve["ci_low"] <= curve["value"] + 1e-12).all() and (curve["value"] <= curve["ci_high"] + 1e-12).all()


def test_pass_curve_k_max_beyond_samples_leaves_tasks_out() -> None:
    curve = pass_curve(_grades({"a": [1, 0, 1], "b": [1]}), k_max=3, n_resamples=200).set_index(["k", "metric"])
    assert curve.loc[(1, "pass@k"), "n_tasks"] == 2 and curve.loc[(3, "pass@k"), "n_tasks"] == 1
    with pytest.raises(StatisticsError, match="k=0"):
        pass_curve(_grades({"a": [1]}), k_max=0)
