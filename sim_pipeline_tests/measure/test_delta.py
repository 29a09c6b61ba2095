"""delta_report verdicts, pairing and comparability; holdout_size against a hand-computed value."""

import numpy as np
import pandas as pd
import pytest

from sim_pipeline.defaults import DELTA_MIN_SHARED_TASKS, EQUIVALENCE_MARGIN, MIN_TASKS_FOR_VERDICT
from sim_pipeline.errors import StatisticsError
from sim_pipeline.measure.delta import DELTA_COLUMNS, delta_report, holdout_size, must_not_regress_failures
from sim_pipeline.measure.stats import paired_bootstrap_ci, sign_flip_test

RESAMPLES = 2000


def _grades(
    version: str, pass_rate: float | np.ndarray, *, n_tasks: int = 40, samples: int = 4, seed: int = 0,
    refusal: float = 0.1, first_task: int = 0, judge: str = "sim/judge@abc123",
) -> pd.DataFrame:
    """Held-out grades: task t passes each sample with probability pass_rate (per task when an array)."""
    rng = np.random.default_rng(seed)
    rates = np.broadcast_to(pass_rate, (n_tasks,))
    rows = [
        {"rollout_id": f"{version}-{t}-{s}", "situation_id": f"s{first_task + t}", "seed": 0,
         "policy_version": version, "split": "heldout", "judge_version": judge,
         "reward": float(rng.random() < rates[t]), "sample_index": s,
         "marker_refusal": float(rng.random() < refusal), "marker_argument_grounding": 1.0}
        for t in range(n_tasks) for s in range(samples)
    ]
    return pd.DataFrame(rows)


def _report(baseline: pd.DataFrame, candidate: pd.DataFrame, **options: object) -> pd.DataFrame:
    return delta_report(baseline, candidate, baseline_version="v1", candidate_version="v2",
                        n_resamples=RESAMPLES, **options).set_index("metric")


def test_columns_and_metric_rows() -> None:
    report = delta_report(_grades("v1", 0.5), _grades("v2", 0.5, seed=1), baseline_version="v1",
                          candidate_version="v2", n_resamples=RESAMPLES)
    assert tuple(report.columns) == DELTA_COLUMNS
    assert list(report["metric"]) == ["pass@1", "pass^4", "pass@4", "marker_argument_grounding",
                                      "marker_refusal"]
    assert set(report["baseline"]) == {"v1"} and set(report["candidate"]) == {"v2"}


def test_clearly_better_candidate_passes() -> None:
    report = _report(_grades("v1", 0.3), _grades("v2", 0.8, seed=1))
    assert report.loc["pass@1", "verdict"] == "PASS"
    assert report.loc["pass@1", "p_value"] < 0.001
    assert report.loc["pass@1", "ci_low"] > 0


def test_identical_tables_are_inconclusive_not_no_difference() -> None:
    # Every task moved by exactly 0: a zero-width interval says nothing about how far other tasks could move,
    # so it is INCONCLUSIVE (it used to read NO DIFFERENCE, also at n=10 where the true delta was ~0.12).
    baseline = _grades("v1", 0.5)
    report = _report(baseline, baseline.assign(policy_version="v2"))
    assert set(report["verdict"]) == {"INCONCLUSIVE"}
    assert (report["delta"] == 0).all() and (report["p_value"] == 1).all()
    assert (report["ci_low"] == report["ci_high"]).all()
    assert report["reason"].str.contains("zero width").all()


def test_a_negligible_change_on_many_tasks_is_no_difference(grades_builder) -> None:
    rng = np.random.default_rng(3)
    before = (rng.random((120, 4)) < rng.beta(0.3, 0.7, (120, 1))).astype(float)
    after = before.copy()
    after[::12, 0] = 1.0 - after[::12, 0]  # one sample of every 12th task flips
    report = delta_report(grades_builder("v1", before), grades_builder("v2", after), baseline_version="v1",
                          candidate_version="v2", markers={}, n_resamples=RESAMPLES).set_index("metric")
    row = report.loc["pass@1"]
    assert row["verdict"] == "NO DIFFERENCE" and "equivalence (TOST) p=" in row["reason"]
    assert -EQUIVALENCE_MARGIN < row["ci_low"] < row["ci_high"] < EQUIVALENCE_MARGIN


def test_too_few_tasks_show_numbers_but_no_verdict() -> None:
    # 12 shared tasks: enough to compute (DELTA_MIN_SHARED_TASKS) but below MIN_TASKS_FOR_VERDICT, so even a
    # large improvement is INCONCLUSIVE, with its delta, interval and p shown.
    assert DELTA_MIN_SHARED_TASKS <= 12 < MIN_TASKS_FOR_VERDICT
    report = _report(_grades("v1", 0.1, n_tasks=12), _grades("v2", 0.9, n_tasks=12, seed=1))
    row = report.loc["pass@1"]
    assert row["verdict"] == "INCONCLUSIVE" and row["delta"] > 0.5 and row["ci_low"] > 0 and row["p_value"] < 0.05
    assert f"a verdict needs {MIN_TASKS_FOR_VERDICT}" in row["reason"]


def test_same_policy_resampled_is_not_a_pass_or_fail() -> None:
    report = _report(_grades("v1", 0.5), _grades("v2", 0.5, seed=9))
    assert set(report["verdict"]) <= {"NO DIFFERENCE", "INCONCLUSIVE"}


def test_delta_is_the_mean_paired_difference() -> None:
    rates = np.linspace(0.1, 0.9, 12)
    baseline, candidate = _grades("v1", rates, n_tasks=12), _grades("v2", rates[::-1], n_tasks=12, seed=3)
    row = _report(baseline, candidate, seed=4).loc["pass@1"]
    before = baseline.groupby("situation_id")["reward"].mean()
    after = candidate.groupby("situation_id")["reward"].mean()
    diffs = (after - before).to_numpy()
    interval = paired_bootstrap_ci(diffs, n_resamples=RESAMPLES, bounds=(-1.0, 1.0), seed=4)
    assert row["before"] == pytest.approx(before.mean()) and row["after"] == pytest.approx(after.mean())
    assert row["delta"] == pytest.approx(diffs.mean())
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((interval.low, interval.high))
    assert row["p_value"] == pytest.approx(sign_flip_test(diffs, n_resamples=RESAMPLES, seed=4))


def test_row_order_and_train_rows_do_not_matter() -> None:
    baseline, candidate = _grades("v1", 0.4), _grades("v2", 0.6, seed=2)
    train = _grades("v2", 1.0, seed=5).assign(split="train")
    shuffled = pd.concat([candidate, train]).sample(frac=1.0, random_state=0)
    pd.testing.assert_frame_equal(_report(baseline, candidate), _report(baseline, shuffled))


def test_disjoint_situations_are_not_comparable() -> None:
    report = _report(_grades("v1", 0.3), _grades("v2", 0.8, first_task=1000))
    assert set(report["verdict"]) == {"NOT COMPARABLE"}
    assert report["delta"].isna().all() and (report["n_tasks"] == 0).all()


def test_small_overlap_is_not_comparable() -> None:
    # 30 of 60 candidate tasks are shared: 50% < the 80% minimum share.
    report = _report(_grades("v1", 0.3, n_tasks=30), _grades("v2", 0.8, n_tasks=60))
    assert set(report["verdict"]) == {"NOT COMPARABLE"}
    assert "30 shared held-out tasks" in report.loc["pass@1", "reason"]


def test_different_judges_are_not_comparable() -> None:
    report = _report(_grades("v1", 0.3), _grades("v2", 0.8, judge="sim/judge@ffffff"))
    assert set(report["verdict"]) == {"NOT COMPARABLE"}
    assert "judge versions differ" in report.loc["pass@1", "reason"]


def test_missing_heldout_side_is_insufficient_data() -> None:
    report = _report(_grades("v1", 0.3), _grades("v2", 0.8).assign(split="train"))
    assert set(report["verdict"]) == {"INSUFFICIENT DATA"}
    assert "candidate has no held-out rows" in report.loc["pass@1", "reason"]


def test_k_beyond_samples_is_insufficient_for_that_metric() -> None:
    report = _report(_grades("v1", 0.3), _grades("v2", 0.8, seed=1), k=6)
    assert report.loc["pass^6", "verdict"] == "INSUFFICIENT DATA"
    assert report.loc["pass@6", "n_tasks"] == 0
    assert report.loc["pass@1", "verdict"] == "PASS"


def test_marker_regression_fails_a_must_not_regress_run() -> None:
    baseline, candidate = _grades("v1", 0.5, refusal=0.05), _grades("v2", 0.5, seed=1, refusal=0.6)
    raw = delta_report(baseline, candidate, baseline_version="v1", candidate_version="v2",
                       markers={"refusal": "lower_is_better"}, must_not_regress=("refusal", "pass^k"),
                       n_resamples=RESAMPLES)
    report = raw.set_index("metric")
    assert report.loc["marker_refusal", "verdict"] == "FAIL"
    assert report.loc["marker_refusal", "reason"].startswith("must not regress")
    assert "marker_argument_grounding" not in report.index  # only the markers asked for
    assert must_not_regress_failures(raw, ("refusal", "pass@1")) == ("marker_refusal",)


def test_invalid_options_raise() -> None:
    baseline, candidate = _grades("v1", 0.5), _grades("v2", 0.5)
    with pytest.raises(StatisticsError, match="must_not_regress names 'latency'"):
        _report(baseline, candidate, must_not_regress=("latency",))
    with pytest.raises(StatisticsError, match="direction 'up'"):
        _report(baseline, candidate, markers={"refusal": "up"})
    with pytest.raises(StatisticsError, match=r"policy_version \['v2'\], not 'v1'"):
        _report(candidate, candidate)
    with pytest.raises(StatisticsError, match="lack column"):
        _report(baseline.drop(columns="split"), candidate)


def test_holdout_size() -> None:
    # ((1.959964 + 0.841621) * 0.5 / 0.1)^2 = 196.2 -> 197 paired tasks.
    assert holdout_size(0.1, sd=0.5) == 197
    assert holdout_size(-0.1, sd=0.5) == 197
    assert holdout_size(0.1, sd=0.5, power=0.9) > 197
    assert holdout_size(0.5, sd=0.0) == 6  # an exact sign-flip test needs 2^(1-n) < 0.05
    with pytest.raises(StatisticsError, match="effect=0"):
        holdout_size(0, sd=0.5)
    with pytest.raises(StatisticsError, match="sd=-1"):
        holdout_size(0.1, sd=-1)


def test_guard_fires_on_fail_verdicts_only() -> None:
    # The guard used to fail a run on an interval on the worse side even when the sign-flip test disagreed
    # (INCONCLUSIVE); that fired 3-5% of the time on identical versions against 2.5% nominal. Now it uses the
    # verdict's rule: an INCONCLUSIVE row never fails the run, a FAIL row always does.
    report = pd.DataFrame({
        "metric": ["pass@1", "marker_refusal", "marker_truncated", "pass^4"],
        "direction": ["higher_is_better", "lower_is_better", "lower_is_better", "higher_is_better"],
        "ci_low": [-0.20, 0.01, -0.1, -0.3], "ci_high": [-0.01, 0.20, 0.1, -0.1],
        "verdict": ["INCONCLUSIVE", "INCONCLUSIVE", "INCONCLUSIVE", "FAIL"],
    })
    guarded = ("pass@1", "refusal", "truncated", "pass^k")
    assert must_not_regress_failures(report, guarded) == ("pass^4",)
    assert must_not_regress_failures(report, ("truncated",)) == ()


@pytest.mark.parametrize("seed", range(6))
def test_guard_agrees_with_the_verdict(seed: int) -> None:
    # Candidates from much worse to much better: the guard fails exactly the guarded metrics whose verdict is FAIL.
    rng = np.random.default_rng(seed)
    rates = rng.beta(0.5, 0.5, 40)
    shift = (-0.4, -0.15, -0.05, 0.0, 0.1, 0.4)[seed]
    baseline = _grades("v1", rates, seed=seed, refusal=0.2)
    candidate = _grades("v2", np.clip(rates + shift, 0, 1), seed=seed + 10, refusal=0.2 - shift / 2)
    report = delta_report(baseline, candidate, baseline_version="v1", candidate_version="v2",
                          markers={"refusal": "lower_is_better"}, n_resamples=500)
    guarded = tuple(report["metric"])
    assert must_not_regress_failures(report, guarded) == tuple(report.loc[report["verdict"] == "FAIL", "metric"])
    if shift <= -0.15:
        assert "pass@1" in must_not_regress_failures(report, ("pass@1",))


def test_direction_column() -> None:
    report = _report(_grades("v1", 0.5), _grades("v2", 0.5, seed=1))
    assert report["direction"].to_dict() == {
        "pass@1": "higher_is_better", "pass^4": "higher_is_better", "pass@4": "higher_is_better",
        "marker_argument_grounding": "higher_is_better", "marker_refusal": "lower_is_better"}


def test_holm_adjusted_p_values_hand_worked() -> None:
    from sim_pipeline.measure.stats import holm_adjusted

    # Sorted 0.01, 0.02, 0.03, 0.5 of m = 4: 4 x 0.01, max(0.04, 3 x 0.02), max(0.06, 2 x 0.03), max(0.06, 0.5).
    got = holm_adjusted([0.03, np.nan, 0.01, 0.5, 0.02])
    assert np.allclose(got, [0.06, np.nan, 0.04, 0.5, 0.06], equal_nan=True)
    assert np.allclose(holm_adjusted([0.9, 0.8]), [1.0, 1.0])


def test_a_row_that_passes_alone_but_not_across_the_table_is_inconclusive() -> None:
    from sim_pipeline.measure.delta import _family_wise

    rows = [{"metric": m, "p_value": p, "verdict": v, "reason": "r."}
            for m, p, v in [("pass@1", 0.004, "PASS"), ("pass^4", 0.03, "PASS"), ("pass@4", 0.4, "INCONCLUSIVE"),
                            ("marker_refusal", np.nan, "INSUFFICIENT DATA"), ("marker_x", 0.6, "INCONCLUSIVE")]]
    out = {r["metric"]: r for r in _family_wise(rows)}
    assert out["pass@1"]["verdict"] == "PASS" and out["pass@1"]["p_adjusted"] == pytest.approx(0.016)
    assert out["pass^4"]["verdict"] == "INCONCLUSIVE" and out["pass^4"]["p_adjusted"] == pytest.approx(0.09)
    assert "Holm's adjusted p=0.09 over 4 metrics" in out["pass^4"]["reason"]
    assert np.isnan(out["marker_refusal"]["p_adjusted"])


def test_detectable_effect_is_holdout_size_solved_for_the_effect() -> None:
    from sim_pipeline.measure.delta import detectable_effect

    for n, sd in [(31, 0.4), (100, 0.25), (400, 0.5)]:
        effect = detectable_effect(n, sd=sd)
        assert holdout_size(effect, sd=sd) in (n, n + 1)  # the ceiling of the same normal formula
        assert detectable_effect(n, sd=sd, tests=6) > effect  # the family-wise level asks more of a row
    assert np.isnan(detectable_effect(31, sd=0.0)) and np.isnan(detectable_effect(1, sd=0.3))


def test_an_inconclusive_row_smaller_than_the_run_can_detect_says_so() -> None:
    report = _report(_grades("v1", 0.5, n_tasks=30), _grades("v2", 0.52, n_tasks=30, seed=1))
    row = report.loc["pass@1"]
    assert row["verdict"] == "INCONCLUSIVE" and 0.1 < row["detectable"] < 0.6
    assert f"detects a change of about {row['detectable']:.3f} with 80% power" in row["reason"]
