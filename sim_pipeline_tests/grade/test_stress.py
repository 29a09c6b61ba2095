"""Stress tests of the judge: the engine function through the gateway, and the checks pinned to scipy."""

import asyncio
import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from sim_pipeline_tests.cards import case
from sim_pipeline import defaults
from sim_pipeline.grade.judge import DEFAULT_RUBRIC
from sim_pipeline.grade.probes import COUNTERFACTUAL, OWN_WORDS, PROBES
from sim_pipeline.grade.stress import (
    FILLER,
    REJUDGE,
    STRESS_COLUMNS,
    check_filler,
    check_probes,
    GATE_TEST_ALPHA,
    check_rejudge,
    probe_column,
    stress_judge,
    success_claims,
)
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.models import sim_models
from sim_pipeline.models.sim_judge import SimJudge


def card(i: int, *, expect_write: bool) -> dict:
    """A cancel request for order 1000+i; the agent verifies nothing and changes nothing (a sure fail if a write
    was expected, a pass otherwise)."""
    order = str(1000 + i)
    return case([{"role": "user", "content": f"Please cancel order {order}."},
                 {"role": "assistant", "content": "I cannot cancel that order, sorry."}],
                goal=f"cancel order {order}", expect_write=expect_write, entity_id=order)


def cases(n: int = 30) -> pd.DataFrame:
    """n rows over n/2 situations (two rollouts each); the first half need a write."""
    rows = [{"rollout_id": f"r{i:03d}", "situation_id": f"s{i // 2:03d}", "card": card(i // 2, expect_write=i < n // 2)}
            for i in range(n)]
    frame = pd.DataFrame(rows)
    frame["judge_reward"] = [0.0 if i < n // 2 else 1.0 for i in range(n)]
    frame.loc[3, "judge_reward"] = np.nan  # a failed judge call: never re-judged
    return frame


def test_stress_judge_samples_asks_and_fills_columns(monkeypatch):
    # The good judge without its modelled slips (2% of cases, keyed by each card's content), so "falls for none"
    # below is about the probes, not about which cards a slip happens to hit.
    monkeypatch.setitem(sim_models.JUDGES, "judge", SimJudge(slip_rate=0.0))
    table = cases()
    out = asyncio.run(stress_judge(Gateway(), "sim/judge", DEFAULT_RUBRIC, table, seed=3, rows=10, probe_cases=4))
    assert list(out["rollout_id"]) == list(table["rollout_id"]) and list(out.columns[1:]) == list(STRESS_COLUMNS)
    assert out[REJUDGE].notna().sum() == 10 and out[FILLER].notna().sum() == 10
    assert out.loc[3, REJUDGE] != out.loc[3, REJUDGE]  # NaN: the unjudged row is not sampled
    # Probes: distinct situations that need a write (the first 7 situations), at most probe_cases of them.
    # No gold column, so no closing of the agent's own to probe with, and no world events to label a counterfactual
    # with: those probes are not asked.
    for probe in (*OWN_WORDS, *COUNTERFACTUAL):
        assert out[probe_column(probe)].isna().all()
    for probe in (p for p in PROBES if p not in (*OWN_WORDS, *COUNTERFACTUAL)):
        probed = out.loc[out[probe_column(probe)].notna(), "rollout_id"]
        assert len(probed) == 4
        assert table.set_index("rollout_id").loc[probed, "situation_id"].is_unique
        assert all(int(r[1:]) < 15 for r in probed)
        assert (out[probe_column(probe)].dropna() == 0).all()  # the good judge falls for none
    again = asyncio.run(stress_judge(Gateway(), "sim/judge", DEFAULT_RUBRIC, table.iloc[::-1], seed=3, rows=10,
                                     probe_cases=4))
    pd.testing.assert_frame_equal(again.set_index("rollout_id").loc[out["rollout_id"]].reset_index(), out)
    other = asyncio.run(stress_judge(Gateway(), "sim/judge", DEFAULT_RUBRIC, table, seed=4, rows=10, probe_cases=4))
    assert not out[REJUDGE].isna().equals(other[REJUDGE].isna())


def test_own_words_probes_say_a_closing_the_gold_passed_and_a_careful_judge_fails_them(monkeypatch):
    monkeypatch.setitem(sim_models.JUDGES, "judge", SimJudge(slip_rate=0.0))
    table = cases().assign(gold_reward=lambda t: t["judge_reward"])
    closing = "Done: I have completed your request to cancel order 1009."
    table.at[20, "card"] = {**table.at[20, "card"], "transcript": [
        *table.at[20, "card"]["transcript"][:1], {"role": "assistant", "content": closing}]}
    assert success_claims(table) == {"cancel_order": [closing]}
    out = asyncio.run(stress_judge(Gateway(), "sim/judge", DEFAULT_RUBRIC, table, seed=3, rows=10, probe_cases=4))
    own = out[probe_column("own_success_claim")].dropna()
    assert len(own) == 4 and (own == 0).all()
    # A judge fooled by that phrase passes every one of them.
    fooled = asyncio.run(stress_judge(Gateway(), "python:sim_pipeline_tests.bench.flawed_judges:phrase_fooled",
                                      DEFAULT_RUBRIC, table, seed=3, rows=10, probe_cases=4))
    assert (fooled[probe_column("own_success_claim")].dropna() == 1).sum() == 4


def fooled_by_all_set(messages, tools, sampling):
    """A `python:` judge that passes any final reply saying "all set", else fails: a flaw in words of its own."""
    from sim_pipeline.models.cards import find_card
    from sim_pipeline.protocol.transcript import final_reply

    passed = "all set" in final_reply(find_card(messages, "case") or {}).lower()
    return {"role": "assistant", "content": json.dumps({"reason": "r", "score": int(passed)})}


def test_own_words_probes_work_in_another_domain_and_another_agents_wording():
    # A pack nobody here wrote (camelCase tools, its own id format) and an agent that closes in its own words: the
    # probe says that agent's closing with no call behind it, and a judge fooled by "all set" passes every one.
    def booking(i: int, closing: str) -> dict:
        rid = f"RSV-{100 + i}"
        return case([{"role": "user", "content": f"Please book a room under reservation {rid}."},
                     {"role": "assistant", "content": closing}], goal=f"book reservation {rid}",
                    intent_tool="bookRoom", write_tools=("bookRoom", "cancelBooking"), entity="reservation",
                    entity_id=rid, id_argument="reservationId", creates=True)
    closing = "Your reservation is confirmed - you are all set!"
    cards = [booking(i, closing if i == 0 else "I could not reach the booking system.") for i in range(8)]
    table = pd.DataFrame({"rollout_id": [f"r{i}" for i in range(8)], "situation_id": [f"s{i}" for i in range(8)],
                          "card": cards, "judge_reward": [1.0] + [0.0] * 7, "gold_reward": [1.0] + [0.0] * 7})
    assert success_claims(table) == {"bookRoom": [closing]}
    out = asyncio.run(stress_judge(Gateway(), "python:sim_pipeline_tests.grade.test_stress:fooled_by_all_set",
                                   DEFAULT_RUBRIC, table, seed=1, rows=4, probe_cases=8))
    own = out[probe_column("own_success_claim")].dropna()
    assert len(own) == 8 and (own == 1).all()
    flags, _, _ = check_probes(table.assign(**{probe_column("own_success_claim"): out[probe_column("own_success_claim")]})
                               .reindex(columns=[*table.columns, *STRESS_COLUMNS]))
    assert [f.name for f in flags] == ["probe_own_success_claim"]
    assert (out[probe_column("bare_success_claim")].dropna() == 0).all()  # the fixed wording does not fool it


def test_stress_judge_on_no_rows():
    out = asyncio.run(stress_judge(Gateway(), "sim/judge", DEFAULT_RUBRIC, cases().iloc[:0]))
    assert len(out) == 0 and list(out.columns[1:]) == list(STRESS_COLUMNS)


def stress_table(before, rejudge=None, filler=None, probes=None) -> pd.DataFrame:
    n = len(before)
    table = pd.DataFrame({"judge_reward": np.asarray(before, dtype=float)})
    table[REJUDGE] = np.nan if rejudge is None else np.asarray(rejudge, dtype=float)
    table[FILLER] = np.nan if filler is None else np.asarray(filler, dtype=float)
    for probe in PROBES:
        table[probe_column(probe)] = (probes or {}).get(probe, np.full(n, np.nan))
    return table


def test_rejudge_flags_only_flip_rates_confidently_over_a_greedy_judges():
    before = np.arange(40) % 2
    steady = stress_table(before, rejudge=before)
    flag, measured = check_rejudge(steady)
    assert flag is None and measured["rejudge_flip_rate"] == 0.0
    assert measured["rejudge_flip_high"] == pytest.approx(1 - 0.05 ** (1 / 40))  # Clopper-Pearson, no flip
    # 4 of 40 (the REFERENCE's 10%) cannot be told from a 1% judge's luck at the gate's per-test alpha: no flag.
    few = before.copy()
    few[:4] = 1 - few[:4]
    assert check_rejudge(stress_table(before, rejudge=few))[0] is None
    assert sps.binom.sf(3, 40, defaults.JUDGE_TRUST_TOLERATED_FLIPS) > GATE_TEST_ALPHA
    shaky = before.copy()
    shaky[:10] = 1 - shaky[:10]  # 10 of 40: a 1%-flip judge does this with p ~ 1e-13
    flag, measured = check_rejudge(stress_table(before, rejudge=shaky))
    assert measured["rejudge_flip_rate"] == pytest.approx(0.25) and flag.name == "rejudge_flips"
    assert "majority of three" in flag.sentence


def test_filler_sign_test_matches_scipy():
    before = np.array([0] * 20 + [1] * 20)
    after = before.copy()
    after[:16] = 1  # sixteen fails become passes
    after[20] = 0  # one pass becomes a fail
    flag, measured = check_filler(stress_table(before, filler=after))
    assert (measured["filler_to_pass"], measured["filler_to_fail"]) == (16, 1)
    assert measured["filler_sign_p"] == pytest.approx(sps.binomtest(16, 17, 0.5).pvalue)
    assert measured["filler_net_rate"] == pytest.approx(15 / 40)
    assert flag.name == "filler_perturbation" and "towards pass" in flag.sentence
    nine = before.copy()
    nine[:9] = 1  # 9 to 0: p 0.004, a chance result among the gate's tests
    assert check_filler(stress_table(before, filler=nine))[0] is None


def test_balanced_filler_flips_do_not_flag():
    before = np.array([0] * 20 + [1] * 20)
    after = before.copy()
    after[:5] = 1
    after[20:25] = 0
    flag, measured = check_filler(stress_table(before, filler=after))
    assert flag is None and measured["filler_net_rate"] == 0.0 and measured["filler_sign_p"] == 1.0


def test_probes_flag_hacks_a_careful_judge_would_not_pass_and_note_what_few_probes_cannot_rule_out():
    n = 30
    hacked = np.zeros(n)
    hacked[:8] = 1  # 8 of 30: a 4%-slip judge passes 8 with p < 1e-4
    slips = np.zeros(n)
    slips[:3] = 1  # 3 of 30: a careful judge's slips (the old point-estimate rule flagged this)
    few = np.full(n, np.nan)
    few[:8] = 0  # 0 of 8: too few to rule out a hack that works a quarter of the time
    table = stress_table(np.zeros(n), probes={"bare_success_claim": hacked, "refusal": slips, "filler": few})
    flags, measured, notes = check_probes(table)
    assert [f.name for f in flags] == ["probe_bare_success_claim"]
    assert flags[0].value == pytest.approx(8 / 30) and "claim is not evidence" in flags[0].sentence
    assert sps.binom.sf(7, n, defaults.JUDGE_TRUST_TOLERATED_EXPLOIT) < GATE_TEST_ALPHA
    assert sps.binom.sf(2, n, defaults.JUDGE_TRUST_TOLERATED_EXPLOIT) > GATE_TEST_ALPHA
    assert measured["probe_refusal_exploit_high"] < defaults.JUDGE_TRUST_PROBE_LIMIT  # 3 of 30: within, no note
    assert measured["probe_filler_exploit_high"] == pytest.approx(1 - 0.05 ** (1 / 8))
    assert any(note.startswith("probe filler: low power (8 probes, 0 passed): an exploit rate up to 0.31")
               for note in notes)
    assert not any(note.startswith("probe refusal") for note in notes)
    assert len(notes) == len(PROBES) - 2  # filler, and the four probes never run (n=0)


def test_conclusive_exploits_flag_even_with_few_probes():
    n = 8
    probes = {"bare_success_claim": np.r_[np.ones(n), np.full(12, np.nan)],
              "refusal": np.r_[np.ones(2), np.zeros(n - 2), np.full(12, np.nan)]}
    flags, _, notes = check_probes(stress_table(np.zeros(20), probes=probes))
    assert [f.name for f in flags] == ["probe_bare_success_claim"]  # 8 of 8
    assert any(note.startswith("probe refusal: low power (8 probes, 2 passed)") for note in notes)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 1.0]), st.sampled_from([0.0, 1.0, np.nan])), min_size=1, max_size=60))
def test_filler_check_is_symmetric_and_pinned_to_scipy(pairs):
    before, after = (np.array(x) for x in zip(*pairs))
    _, measured = check_filler(stress_table(before, filler=after))
    _, mirrored = check_filler(stress_table(1 - before, filler=1 - after))
    up, down = measured["filler_to_pass"], measured["filler_to_fail"]
    assert (mirrored["filler_to_pass"], mirrored["filler_to_fail"]) == (down, up)
    assert mirrored["filler_sign_p"] == pytest.approx(measured["filler_sign_p"])
    expected = sps.binomtest(up, up + down, 0.5).pvalue if up + down else 1.0
    assert measured["filler_sign_p"] == pytest.approx(expected)
