"""Judge agreement statistics pinned to hand-worked values and scipy; trust verdicts on constructed judges."""

import hashlib

import numpy as np
import pandas as pd
import pytest
from scipy import stats as sps

from sim_pipeline import defaults
from sim_pipeline.errors import StatisticsError
from sim_pipeline.grade.judge_trust import (
    flag_lines,
    judge_agreement,
    judge_trust_report,
    model_family,
    report_tables,
    stable_half,
)
from sim_pipeline.grade.probes import COUNTERFACTUAL, PROBES
from sim_pipeline.grade.stress import GATE_TEST_ALPHA
from sim_pipeline.measure.rate_bounds import effective_counts


def _gold_table(gold: np.ndarray, judge: np.ndarray, *, chars: np.ndarray | None = None,
                status: list[str] | None = None, judge_version: str = "sim/judge@abc") -> pd.DataFrame:
    """Grades with one gold-labelled rollout per task, plus an unlabelled row the report must ignore."""
    n = len(gold)
    table = pd.DataFrame({
        "situation_id": [f"s{i}" for i in range(n)],
        "judge_reward": judge.astype(float),
        "judge_status": status or ["ok"] * n,
        "gold_reward": gold.astype(float),
        "reply_chars": chars if chars is not None else np.full(n, 200),
        "judge_version": judge_version,
    })
    unlabelled = table.iloc[:1].assign(situation_id="free", gold_reward=np.nan, judge_reward=0.0)
    return pd.concat([table, unlabelled], ignore_index=True)


def _balanced(n: int = 100) -> np.ndarray:
    return np.arange(n) % 2


def _report(table: pd.DataFrame, **options: object):
    return judge_trust_report(table, policy_model="sim/agent-v1", judge_model="sim/judge", **options)


def test_kappa_hand_worked() -> None:
    # tp=20, fn=5, fp=10, tn=15: p_o = 35/50 = 0.7; judge says pass 30/50, gold 25/50;
    # p_e = 0.6*0.5 + 0.4*0.5 = 0.5; kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4.
    gold = np.array([1] * 25 + [0] * 25)
    judge = np.array([1] * 20 + [0] * 5 + [1] * 10 + [0] * 15)
    a = judge_agreement(judge, gold)
    assert (a.tp, a.fn, a.fp, a.tn) == (20, 5, 10, 15)
    assert a.agreement == pytest.approx(0.7)
    assert a.kappa == pytest.approx(0.4)
    assert a.leak_rate == pytest.approx(10 / 25) and a.miss_rate == pytest.approx(5 / 25)
    ci = sps.binomtest(35, 50).proportion_ci(method="wilson")
    assert (a.ci_low, a.ci_high) == pytest.approx((ci.low, ci.high))


def test_failed_judge_rows_are_counted_apart() -> None:
    a = judge_agreement([1, np.nan, 0, np.nan], [1, 0, 0, np.nan])
    assert (a.n, a.n_judge_failed, a.agreement) == (2, 1, 1.0)  # the NaN-gold row is not a failure


def test_agreement_rejects_non_binary_and_misaligned() -> None:
    with pytest.raises(StatisticsError, match="judge holds"):
        judge_agreement([0.5, 1], [1, 1])
    with pytest.raises(StatisticsError, match="aligned"):
        judge_agreement([1, 1], [1])


def test_always_pass_judge_is_untrusted_with_leak_flag() -> None:
    gold = _balanced()
    report = _report(_gold_table(gold, np.ones_like(gold)))
    flags = {flag.name: flag for flag in report.flags}
    assert report.verdict == "untrusted"
    assert flags["leak_rate"].value == 1.0
    assert "guessing" in flags["kappa"].sentence
    assert "disagreement" in flags


def test_perfect_judge_is_trusted() -> None:
    gold = _balanced()
    chars = np.random.default_rng(0).integers(50, 900, size=gold.size)
    report = _report(_gold_table(gold, gold, chars=chars))
    assert report.verdict == "trusted" and report.flags == ()
    assert report.metrics["kappa"] == 1.0 and report.metrics["n_gold"] == 100
    assert report.needed_more_gold == 0


def test_ten_gold_labels_are_inconclusive() -> None:
    gold = _balanced(10)
    report = _report(_gold_table(gold, gold))
    assert report.verdict == "inconclusive"
    assert report.flags[0].name == "gold_count" and "label 40 more" in report.flags[0].sentence
    # The leak check cannot place 5 gold failures either (19 without a leak bound it under 15%: 0.85**19 < 0.05),
    # and the judge-failure check needs 29 rows; the floor's 40 more covers both.
    assert report.needed_more_gold == 40
    assert {"leak_rate_undecided", "judge_failures_undecided"} <= {f.name for f in report.undecided}


def test_a_judge_whose_every_reply_is_unreadable_is_untrusted_before_the_gold_floor() -> None:
    # Issue 34: a 135M model as judge wrote prose, never {reason, score}; it has no judged gold row, so the 50-label
    # floor alone would call it inconclusive and ask for gold that could never make it trusted.
    gold = _balanced(8)
    report = _report(_gold_table(gold, np.full(gold.size, np.nan), status=["invalid_result"] * gold.size))
    assert report.verdict == "untrusted" and report.agreement.n == 0
    assert "judge_failures" in {flag.name for flag in report.flags}
    # Nor does it ask for gold: labelling more would not change the verdict, fixing the judge's output would.
    assert "gold_count" not in {flag.name for flag in report.flags} and report.needed_more_gold == 0
    assert not any("label" in line for line in flag_lines(report))
    # A careful judge on as few rows stays inconclusive: only a rate placed over its tolerance refuses early.
    assert _report(_gold_table(gold, gold)).verdict == "inconclusive"


def test_one_class_gold_set_is_inconclusive() -> None:
    gold = np.ones(60, dtype=int)
    assert _report(_gold_table(gold, gold)).verdict == "inconclusive"


def test_length_biased_judge_is_flagged() -> None:
    # The judge passes every long reply: right on gold passes, wrong on long gold failures.
    gold = _balanced(200)
    chars = np.tile([100, 100, 900, 900], 50)
    judge = np.where(chars > 500, 1, gold)
    report = _report(_gold_table(gold, judge, chars=chars))
    flags = {flag.name: flag for flag in report.flags}
    assert flags["length_sensitivity"].value == pytest.approx(1.0)
    assert "length" in flags["length_sensitivity"].sentence


def test_judge_that_only_fits_half_the_tasks_is_flagged() -> None:
    gold = _balanced(200)
    half = np.array([stable_half(f"s{i}") for i in range(200)])
    judge = np.where(half == 0, gold, 1 - gold)
    assert _report(_gold_table(gold, judge)).metrics["half_gap"] == pytest.approx(1.0)
    assert "heldout_halves" in {flag.name for flag in _report(_gold_table(gold, judge)).flags}


def test_same_family_judge_is_flagged() -> None:
    gold = _balanced()
    report = judge_trust_report(_gold_table(gold, gold), policy_model="openai/gpt-4o", judge_model="openai/gpt-4o-mini")
    assert report.verdict == "untrusted"
    assert [flag.name for flag in report.flags] == ["judge_family"]


def test_judge_failures_and_mixed_versions_are_flagged() -> None:
    gold = _balanced()
    status = ["timeout" if i % 5 == 0 else "ok" for i in range(gold.size)]
    table = _gold_table(gold, gold, status=status)
    table.loc[1, "judge_version"] = "sim/judge@other"
    report = _report(table)
    names = {flag.name for flag in report.flags}
    assert {"judge_failures", "judge_versions"} <= names
    assert report.agreement.n_judge_failed == 20 and report.agreement.n == 80


def test_judge_model_defaults_to_judge_version() -> None:
    gold = _balanced()
    report = judge_trust_report(_gold_table(gold, gold, judge_version="sim/agent-v2@abc"),
                                policy_model="sim/agent-v1", judge_model=None)
    assert report.metrics["judge_family"] == "agent" and report.verdict == "untrusted"


@pytest.mark.parametrize(("model", "family"), [("sim/agent-v1", "agent"), ("sim/judge", "judge"),
                                                ("openai/gpt-4o-mini", "gpt"), ("anthropic/claude-3-5-sonnet", "claude"),
                                                ("qwen2.5-7b-instruct", "qwen"), ("sim/judge@0123abcd", "judge")])
def test_model_family(model: str, family: str) -> None:
    assert model_family(model) == family


def test_stable_half_uses_sha256_not_hash() -> None:
    assert stable_half("s0") == hashlib.sha256(b"s0").digest()[0] & 1
    halves = [stable_half(f"s{i}") for i in range(1000)]
    assert 400 < sum(halves) < 600


def test_report_tables() -> None:
    gold = _balanced()
    tables = report_tables(_report(_gold_table(gold, np.ones_like(gold))))
    assert tables["confusion"].loc["judge pass", "gold fail"] == 50
    assert tables["confusion"].to_numpy().sum() == 100
    assert set(tables["flags"]["name"]) >= {"leak_rate", "kappa"}
    assert tables["metrics"].set_index("metric").loc["verdict", "value"] == "untrusted"


def test_report_requires_columns() -> None:
    with pytest.raises(StatisticsError, match="reply_chars"):
        _report(_gold_table(_balanced(), _balanced()).drop(columns="reply_chars"))


# Each embedded judge on real retail rollouts: the flags it must raise, and the only ones it may raise.
# Flags of one family measure one flaw: a length bias shows in the filler perturbation, the filler probe and
# (observed) length sensitivity; a lenient judge in its leak rate and the success-claim probes (and, as it takes
# the agent's word on every kind of case, in agreement and kappa: every leaked failure is a disagreement).
# A judge swayed by words (the lenient one by claims, the length-biased one by long replies) may also pass the
# counterfactual probes, and one wrong on whole kinds of case may fall under the agreement limit within a tool.
COUNTERFACTUAL_FLAGS = {"probe_closing_swap", "probe_tool_renamed"}
JUDGES = {
    "sim/judge": (set(), set()),
    "sim/judge-lenient": ({"leak_rate", "probe_bare_success_claim"},
                          {"leak_rate", "leak_by_tool", "probe_bare_success_claim", "probe_own_success_claim",
                           "disagreement", "kappa", "agreement_by_tool", *COUNTERFACTUAL_FLAGS}),
    "sim/judge-length-biased": ({"filler_perturbation"},
                                {"filler_perturbation", "probe_filler", "length_sensitivity", *COUNTERFACTUAL_FLAGS}),
    "sim/judge-noisy": ({"rejudge_flips"}, {"rejudge_flips", "disagreement", "kappa", "agreement_by_tool"}),
}


@pytest.mark.parametrize("judge", list(JUDGES))
def test_each_embedded_judge_trips_its_own_flags(graded, judge):
    report = judge_trust_report(graded(judge), policy_model="sim/agent-v1", judge_model=judge)
    required, allowed = JUDGES[judge]
    names = {flag.name for flag in report.flags}
    assert required <= names <= allowed, (names, report.metrics)
    assert report.verdict == ("trusted" if judge == "sim/judge" else "untrusted")
    # Every probe had enough cases (the counterfactual ones start from cases the judge got right: fewer for a flawed
    # judge, half for the noisy one); a low-power note is then a flawed judge passing some of them.
    assert report.metrics["n_judged"] >= 150
    full = PROBES if judge == "sim/judge" else tuple(p for p in PROBES if p not in COUNTERFACTUAL)
    assert all(report.metrics[f"probe_{p}_n"] >= defaults.JUDGE_TRUST_MIN_PROBES for p in full), report.metrics
    assert judge != "sim/judge" or not any("low power" in note for note in report.notes)
    if judge == "sim/judge-noisy":
        assert names & {"disagreement", "kappa"}
    for flag in report.flags:
        assert flag.sentence.rstrip().endswith(".") and len(flag.sentence) > 40


def test_a_confounded_length_gap_is_a_note_not_a_flag():
    # Judge errors sit on long replies, but appending filler (length alone) moved no verdict.
    gold = _balanced(200)
    chars = np.tile([100, 100, 900, 900], 50)
    judge = np.where(chars > 500, 1, gold)
    table = _gold_table(gold, judge, chars=chars).iloc[:-1]
    assert "length_sensitivity" in {f.name for f in _report(table).flags}  # no stress columns: flagged
    stressed = table.assign(judge_rejudge_reward=table["judge_reward"], judge_filler_reward=table["judge_reward"])
    for probe in PROBES:
        stressed[f"probe_{probe}_reward"] = np.r_[np.zeros(20), np.full(len(table) - 20, np.nan)]
    report = _report(stressed)
    assert "length_sensitivity" not in {f.name for f in report.flags} and "leak_rate" in {f.name for f in report.flags}
    assert any("not their length" in note for note in report.notes)
    assert report.metrics["filler_n"] == 200 and report.metrics["probe_refusal_n"] == 20


def test_report_without_stress_columns_says_so():
    gold = _balanced()
    report = _report(_gold_table(gold, gold))
    assert report.verdict == "trusted" and report.notes and "not run" in report.notes[0]
    assert report_tables(report)["notes"]["note"].tolist() == list(report.notes)


def test_one_class_gold_flag_names_the_missing_class():
    gold = np.ones(60, dtype=int)
    report = _report(_gold_table(gold, gold))
    assert [f.name for f in report.flags] == ["gold_one_class"] and "label failing rollouts" in report.flags[0].sentence
    assert report.needed_more_gold == 0


def test_human_gold_rows_are_counted():
    gold = _balanced()
    table = _gold_table(gold, gold).assign(gold_source="program")
    table.loc[:9, "gold_source"] = "human"
    assert _report(table).metrics["n_gold_human"] == 10


def _clustered(tasks: int, samples: int, wrong_tasks: set[int], *, tool_of=lambda task: "get_order",
               leak_tasks: set[int] = frozenset()) -> pd.DataFrame:
    """`samples` rollouts per task, gold alternating by task; the judge wrong on every sample of `wrong_tasks`
    and passing every failure of `leak_tasks`."""
    task = np.repeat(np.arange(tasks), samples)
    gold = (task % 2).astype(float)
    judge = np.where(np.isin(task, list(wrong_tasks)), 1 - gold, gold)
    judge = np.where(np.isin(task, list(leak_tasks)) & (gold == 0), 1.0, judge)
    return pd.DataFrame({"situation_id": [f"t{t}" for t in task], "judge_reward": judge, "judge_status": "ok",
                         "gold_reward": gold, "reply_chars": 200, "judge_version": "sim/judge@abc",
                         "tool": [tool_of(t) for t in task]})


def test_a_careful_judge_whose_slips_repeat_on_a_task_is_trusted_and_an_85_percent_judge_is_not():
    careful = _report(_clustered(100, 5, {3, 10, 41, 77}))  # 4% of tasks, every sample: 20 of 500 rows wrong
    assert careful.verdict == "trusted", careful.flags
    assert careful.metrics["disagreement_n_effective"] < 200  # 500 rows, but errors counted per task
    sloppy = _report(_clustered(100, 5, set(range(0, 100, 7)) | {1, 3}))  # 17 of 100 tasks wrong
    assert sloppy.verdict == "untrusted"
    assert "disagreement" in {f.name for f in sloppy.flags}


def test_a_judge_that_rewards_one_tools_call_is_refused_although_its_overall_leak_is_low():
    # 240 tasks (120 gold failures), one in 12 failing tasks a refund; the judge passes every refund failure.
    tools = ["get_order", "cancel_order", "update_address", "return_item", "track_shipment"]
    table = _clustered(240, 2, {5}, tool_of=lambda t: "refund_order" if t % 24 == 0 else tools[t % 5],
                       leak_tasks={t for t in range(240) if t % 24 == 0})
    report = _report(table)
    names = {f.name for f in report.flags}
    assert report.metrics["leak_rate"] < 0.10 and "leak_by_tool" in names, report.flags
    assert "leak_rate" not in names
    flag = next(f for f in report.flags if f.name == "leak_by_tool")
    assert "refund_order" in flag.sentence and flag.value == 1.0


def test_a_judge_the_gold_cannot_yet_place_is_inconclusive_with_the_labels_that_would_decide():
    # 10% wrong: 3 of 30 gold failures passed. Under the 20% disagreement limit, but a 10% leak over 30 failures
    # may be anything up to ~24%: neither fine nor a flag.
    table = _gold_table(_balanced(60), np.where(np.arange(60) < 6, 1 - _balanced(60), _balanced(60)))
    report = _report(table)
    assert report.verdict == "inconclusive" and not report.flags
    undecided = {f.name: f.sentence for f in report.undecided}
    assert set(undecided) == {"leak_rate_undecided"} and "label about" in undecided["leak_rate_undecided"]
    assert report.needed_more_gold > 0


def test_agreement_per_intended_tool_with_wilson_bounds_flags_a_tool_the_judge_reads_wrongly():
    # One row per task. get_order: 200 right; cancel_order: 20 rows, 10 wrong; refund_order: 20 all wrong (the
    # judge cannot read refunds, 9% of the rows: the overall agreement stays 0.87); track_shipment: 5 rows, too few.
    tools = ["get_order"] * 200 + ["cancel_order"] * 20 + ["refund_order"] * 20 + ["track_shipment"] * 5
    gold = np.arange(len(tools)) % 2
    wrong = np.array([t == "refund_order" for t in tools]) | (np.array([t == "cancel_order" for t in tools])
                                                              & (np.arange(len(tools)) % 4 < 2))
    wrong |= np.array([t == "track_shipment" for t in tools])
    table = _gold_table(gold, np.where(wrong, 1 - gold, gold)).iloc[:-1].assign(tool=tools)
    report = _report(table)
    by_tool = report_tables(report)["by_tool"].set_index("tool")
    assert list(by_tool.index) == sorted(set(tools))
    level = 1 - 2 * GATE_TEST_ALPHA / 3  # one-sided alpha, split over the three tools with enough rows
    for tool, agreed, n in (("get_order", 200, 200), ("refund_order", 0, 20)):  # no spread: counts stay whole
        ci = sps.binomtest(agreed, n).proportion_ci(confidence_level=level, method="wilson")
        row = by_tool.loc[tool]
        assert (row["n"], row["n_effective"], row["agreement"]) == (n, n, agreed / n)
        assert (row["wilson_low"], row["wilson_high"]) == pytest.approx((ci.low, ci.high))
    cancel = by_tool.loc["cancel_order"]
    wrong_cancel = wrong[np.array(tools) == "cancel_order"]
    assert cancel["n_effective"] == pytest.approx(effective_counts(wrong_cancel, np.arange(20).astype(str))[1])
    assert cancel["agreement"] == pytest.approx(0.5)
    assert by_tool["decision"].to_dict() == {"cancel_order": "undecided", "get_order": "above_limit",
                                             "refund_order": "below_limit", "track_shipment": "too_few_rows"}
    flag = next(f for f in report.flags if f.name == "agreement_by_tool")
    assert "refund_order" in flag.sentence and flag.value == 0.0
    assert flag.threshold == pytest.approx(1 - defaults.JUDGE_TRUST_MAX_DISAGREEMENT)
    assert report.metrics["agreement_by_tool_worst"] == "refund_order"
    # The same judge with refunds read right: no tool under the limit, and no flag.
    fixed = _report(table.assign(judge_reward=np.where(table["tool"] == "refund_order", table["gold_reward"],
                                                       table["judge_reward"])))
    assert "agreement_by_tool" not in {f.name for f in fixed.flags}
    assert "below_limit" not in {row.decision for row in fixed.by_tool}
