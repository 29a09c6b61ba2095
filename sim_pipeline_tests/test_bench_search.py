"""The search benchmark's verdict on issue 35's goals (sim_pipeline_tests/bench/bench_search.py): the bootstrap
interval over seeds recomputes each goal figure as its point value is computed, and the verdict reads the interval."""

import pytest

from sim_pipeline_tests.bench import bench_search as bench


def _results(weighted: list[float], structured: list[float], firsts: list[dict[str, int]]) -> dict[str, dict]:
    rows = [800] * len(weighted)
    return {"weighted": {"per_1000": weighted, "first": firsts, "rows": rows},
            "uniform": {"per_1000": weighted, "first": firsts, "rows": rows},
            "structured_only": {"per_1000": structured, "first": [{"a": 40, "b": 400}] * len(weighted), "rows": rows}}


def test_the_verdict_needs_the_whole_interval_on_one_side_of_the_goal():
    assert bench.verdict((1.3, 1.5), 1.3) == "meets goal"
    assert bench.verdict((1.0, 1.29), 1.3) == "below goal"
    assert bench.verdict((1.2, 1.4), 1.3) == "inconclusive"


def test_identical_seeds_give_an_interval_of_the_point_value():
    results = _results([30.0] * 4, [20.0] * 4, [{"a": 20, "b": 100}] * 4)
    intervals = bench.bootstrap_intervals(results, resamples=50)
    assert intervals["failure_signatures_ratio_vs_structured"] == pytest.approx((1.5, 1.5))
    assert intervals["first_failure_speedup"] == pytest.approx((2.0 ** 1.5,) * 2)  # sqrt(2 x 4)


def test_the_interval_is_seeded_and_holds_the_point_value():
    # seed 3 never meets kind "b": censored at its rows drawn, as the point value counts it
    results = _results([30.0, 10.0, 25.0, 45.0], [20.0, 25.0, 15.0, 30.0],
                       [{"a": 20, "b": 100}, {"a": 80, "b": 300}, {"a": 10}, {"a": 40, "b": 500}])
    values = bench._goal_values(results, bench._kinds(results))
    intervals = bench.bootstrap_intervals(results, resamples=400)
    assert intervals == bench.bootstrap_intervals(results, resamples=400)
    for figure, (lo, hi) in intervals.items():
        assert lo < values[figure]["weighted"] < hi


def _failed(reason: str, sent: dict) -> dict:
    """A rollout the oracle failed with `reason`, whose one call sent `sent` (no message breaks a conduct rule)."""
    import json

    return {"messages": [{"role": "user", "content": "Hi"}], "tool_events": [{"tool": "refund_order", "arguments":
            json.dumps(sent), "status": "rejected", "turn": 1}], "user_events": [], "final_text": "",
            "oracle_reward": 0.0, "oracle_reason": reason}


def test_a_failure_kind_holds_no_value_the_agent_sent_nor_the_users():
    """Two rollouts failing the same way are one kind, whatever ids and values they carried: an id filled with the
    user's words, a record number, a value in braces after "the user's"."""
    from sim_pipeline.domain import load_domain

    retail = load_domain("retail")
    words = "Would it be possible to sort this out"
    kinds = {bench.failure_kind(_failed(f"attempted refund_order on {record} (the world answered 'not_found'), not "
                                        "the user's record 48213", {"order_id": record}), retail)
             for record in (words, "51234")}
    assert kinds == {"oracle: attempted on, not the user's record"}
    kinds = {bench.failure_kind(_failed(f"attempted refund_order (the world answered 'rejected') with {{'amount': "
                                        f"{sent}}}, not the user's {{'amount': 300}}", {"amount": sent}), retail)
             for sent in (240, 345.5)}
    assert kinds == {"oracle: attempted with, not the user's"}


def test_a_figure_over_streams_is_the_mean_of_each_pairs_point_value_with_the_lowest_and_highest():
    lucky = _results([30.0] * 4, [20.0] * 4, [{"a": 20, "b": 100}] * 4)  # ratio 1.5, speedup sqrt(2 x 4)
    plain = _results([24.0] * 4, [20.0] * 4, [{"a": 40, "b": 400}] * 4)  # ratio 1.2, speedup 1
    figures = bench.over_streams([lucky, plain])
    assert figures["failure_signatures_ratio_vs_structured"] == pytest.approx({"mean": 1.35, "low": 1.2, "high": 1.5})
    assert figures["first_failure_speedup"] == pytest.approx({"mean": (8 ** 0.5 + 1) / 2, "low": 1.0,
                                                              "high": 8 ** 0.5})
    one = bench._goal_values(lucky, bench._kinds(lucky))
    assert bench.over_streams([lucky])["first_failure_speedup"]["mean"] == pytest.approx(
        one["first_failure_speedup"]["weighted"])
