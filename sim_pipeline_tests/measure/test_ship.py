"""The ship decision: each branch on constructed delta tables, a guard that blocks a better primary, doubts that
overrule the table, and a property: never SHIP unless the primary's interval and Holm p show an improvement."""

import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_pipeline.defaults import DELTA_ALPHA, MIN_TASKS_FOR_VERDICT
from sim_pipeline.measure.delta import DELTA_COLUMNS, delta_report
from sim_pipeline.measure.ship import DO_NOT_SHIP, INCONCLUSIVE, SHIP, TrustState, ship_decision
from sim_pipeline.measure.verdict import FAIL, NO_DIFFERENCE, NOT_COMPARABLE, PASS, VERDICTS
from sim_pipeline_tests.measure.test_delta import RESAMPLES, _grades

NAN = math.nan


def row(metric, delta, low, high, p_adj, verdict, *, direction="higher_is_better", n=40, detectable=0.1,
        reason=""):
    """One delta_report row with the figures the decision reads (the rest filled plausibly)."""
    return {"metric": metric, "baseline": "base-1", "candidate": "cand-2", "n_tasks": n, "before": 0.5,
            "after": 0.5 + delta if math.isfinite(delta) else NAN, "delta": delta, "ci_low": low, "ci_high": high,
            "p_value": p_adj, "p_adjusted": p_adj, "verdict": verdict, "reason": reason, "direction": direction,
            "n_seeds": 1, "seed_sd": NAN, "n_ungraded_tasks": 0, "detectable": detectable}


def table(*rows):
    return pd.DataFrame(list(rows), columns=list(DELTA_COLUMNS))


BETTER = row("pass@1", 0.12, 0.05, 0.19, 0.003, PASS)
FLAT_MARKERS = [row("marker_refusal", 0.01, -0.04, 0.06, 0.9, INCONCLUSIVE, direction="lower_is_better"),
                row("marker_truncated", 0.0, 0.0, 0.0, NAN, INCONCLUSIVE, direction="lower_is_better")]
# More refusals are worse: +0.10 of refusal, its interval wholly above 0, is a significant regression.
REFUSING = row("marker_refusal", 0.10, 0.05, 0.15, 0.004, FAIL, direction="lower_is_better")


def decide(frame, **options):
    return ship_decision(frame, candidate="cand-2", baseline="base-1", **options)


def test_a_significant_primary_gain_with_nothing_worse_ships_and_the_line_names_its_figures():
    d = decide(table(BETTER, row("pass^4", 0.05, -0.02, 0.12, 0.3, INCONCLUSIVE), *FLAT_MARKERS),
               must_not_regress=("refusal",))
    assert d.decision == SHIP and d.guarded == ("marker_refusal",)
    assert d.line == ("SHIP cand-2 over base-1: pass@1 +0.120 [+0.050, +0.190], Holm p 0.003; no metric "
                      "significantly worse (guarded: marker_refusal)")


def test_a_guarded_metric_worse_forbids_shipping_a_better_primary():
    d = decide(table(BETTER, REFUSING), must_not_regress=("refusal",))
    assert d.decision == DO_NOT_SHIP
    assert d.reason == "guarded marker_refusal +0.100 [+0.050, +0.150], Holm p 0.004 worse"


def test_an_unguarded_metric_worse_blocks_ship_without_forbidding_it():
    d = decide(table(BETTER, REFUSING))  # nothing declared must_not_regress: a trade-off, not a verdict
    assert d.decision == INCONCLUSIVE and "marker_refusal +0.100" in d.reason and "not guarded" in d.reason


def test_a_worse_primary_is_do_not_ship():
    d = decide(table(row("pass@1", -0.12, -0.19, -0.05, 0.003, FAIL), *FLAT_MARKERS))
    assert d.decision == DO_NOT_SHIP and d.reason.startswith("pass@1 -0.120 [-0.190, -0.050], Holm p 0.003 worse")


@pytest.mark.parametrize("doubt, says", [
    (TrustState(judge={"cand-2 seed 0": "trusted", "base-1 seed 0": "untrusted"}),
     "judge trust untrusted for base-1 seed 0"),
    (TrustState(judge={"cand-2 seed 3": "inconclusive"}), "judge trust inconclusive for cand-2 seed 3"),
    (TrustState(unhealthy=("cand-2",)), "rollout_health failed for cand-2"),
    (TrustState(poor_fit=("base-1",)), "the world fits the domain poorly for base-1"),
    (TrustState(stale=True), "the delta is stale"),
])
def test_numbers_the_run_cannot_vouch_for_decide_nothing(doubt, says):
    for frame in (table(BETTER, *FLAT_MARKERS), table(BETTER, REFUSING)):  # would SHIP; would not
        d = decide(frame, must_not_regress=("refusal",), trust=doubt)
        assert d.decision == INCONCLUSIVE and d.reason.startswith(says), d.reason
    assert decide(table(BETTER), trust=TrustState(judge={"cand-2 seed 0": "trusted"})).decision == SHIP


@pytest.mark.parametrize("primary, why", [
    (row("pass@1", 0.12, 0.05, 0.19, 0.09, INCONCLUSIVE), "the family-wise rule does not confirm it"),
    (row("pass@1", 0.03, -0.04, 0.10, 0.4, INCONCLUSIVE, detectable=0.15), "power (this run detects about 0.15"),
    (row("pass@1", 0.20, -0.05, 0.45, 0.2, INCONCLUSIVE, detectable=0.15), "width (the interval spans 0)"),
    (row("pass@1", 0.2, 0.1, 0.3, 0.01, INCONCLUSIVE, n=MIN_TASKS_FOR_VERDICT - 1), "too few tasks (15 paired"),
    (row("pass@1", 0.05, NAN, NAN, NAN, INCONCLUSIVE), "no spread"),
    (row("pass@1", 0.01, -0.02, 0.03, 0.8, NO_DIFFERENCE), "no meaningful difference"),
    (row("pass@1", NAN, NAN, NAN, NAN, NOT_COMPARABLE, reason="the judges differ; re-grade both."),
     "pass@1 NOT COMPARABLE: the judges differ; re-grade both"),
])
def test_inconclusive_says_why(primary, why):
    d = decide(table(primary, *FLAT_MARKERS))
    assert d.decision == INCONCLUSIVE and why in d.reason, d.reason


def test_power_says_how_many_tasks_would_detect_the_change():
    d = decide(table(row("pass@1", 0.05, -0.04, 0.14, 0.4, INCONCLUSIVE, n=40, detectable=0.10)))
    assert "about 160 tasks would detect a change this size" in d.reason  # 40 * (0.10 / 0.05)^2


def test_a_guard_that_could_not_be_compared_blocks_ship():
    unknown = row("marker_refusal", NAN, NAN, NAN, NAN, "INSUFFICIENT DATA", direction="lower_is_better")
    d = decide(table(BETTER, unknown), must_not_regress=("refusal",))
    assert d.decision == INCONCLUSIVE and "guarded marker_refusal could not be compared" in d.reason


def test_a_pass_label_its_numbers_do_not_back_does_not_ship():
    assert decide(table(row("pass@1", 0.1, -0.01, 0.2, 0.003, PASS))).decision == INCONCLUSIVE  # spans 0
    assert decide(table(row("pass@1", 0.1, 0.02, 0.2, 0.2, PASS))).decision == INCONCLUSIVE  # Holm p too high
    assert decide(None).decision == INCONCLUSIVE and decide(table(*FLAT_MARKERS)).decision == INCONCLUSIVE


def test_on_delta_report_tables():
    better = delta_report(_grades("v1", 0.3), _grades("v2", 0.8, seed=1), baseline_version="v1",
                          candidate_version="v2", n_resamples=RESAMPLES)
    assert ship_decision(better, candidate="v2", baseline="v1").decision == SHIP
    # The same gain with refusals up from 10% to 60% of samples, refusal guarded: the guard forbids it.
    refusing = delta_report(_grades("v1", 0.3), _grades("v2", 0.8, seed=1, refusal=0.6), baseline_version="v1",
                            candidate_version="v2", n_resamples=RESAMPLES, must_not_regress=("refusal",))
    assert ship_decision(refusing, candidate="v2", baseline="v1", must_not_regress=("refusal",)).decision == \
        DO_NOT_SHIP
    same = _grades("v1", 0.5)
    null = delta_report(same, _grades("v2", 0.5, seed=7), baseline_version="v1", candidate_version="v2",
                        n_resamples=RESAMPLES)
    assert ship_decision(null, candidate="v2", baseline="v1").decision == INCONCLUSIVE


finite = st.floats(-1, 1, allow_nan=False)
maybe = st.one_of(finite, st.just(NAN))


@st.composite
def any_row(draw, metric):
    low, high = sorted((draw(maybe), draw(maybe)), key=lambda x: (math.isnan(x), x))
    return row(metric, draw(maybe), low, high, draw(st.one_of(st.floats(0, 1), st.just(NAN))),
               draw(st.sampled_from(VERDICTS)), direction=draw(st.sampled_from(["higher_is_better",
                                                                                "lower_is_better"])),
               n=draw(st.integers(0, 200)), detectable=draw(maybe))


@settings(max_examples=400, deadline=None)
@given(primary=any_row("pass@1"), others=st.lists(st.sampled_from(["pass^4", "marker_refusal"]), unique=True)
       .flatmap(lambda names: st.tuples(*[any_row(n) for n in names])),
       guard=st.booleans())
def test_never_ship_without_an_interval_above_zero_and_holm_p_under_alpha(primary, others, guard):
    frame = table(primary, *others)
    guarded = ("pass@1",) if guard else ()
    d = decide(frame, must_not_regress=guarded)
    assert d.decision in (SHIP, DO_NOT_SHIP, INCONCLUSIVE) and d.line.startswith(d.decision)
    if d.decision == SHIP:
        sign = 1 if primary["direction"] == "higher_is_better" else -1
        assert primary["verdict"] == PASS and primary["p_adjusted"] < DELTA_ALPHA
        assert sign * primary["ci_low"] > 0 and sign * primary["ci_high"] > 0  # the interval excludes 0
        assert FAIL not in {r["verdict"] for r in others}
        assert decide(frame, must_not_regress=guarded,
                      trust=TrustState(judge={"cand-2 seed 0": "untrusted"})).decision == INCONCLUSIVE
