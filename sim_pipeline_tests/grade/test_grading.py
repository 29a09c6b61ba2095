"""grade_rollouts on real retail rollouts: columns, rewards, judge failures, caching, and human gold labels."""

import asyncio
import dataclasses
import json

import numpy as np
import pytest

from sim_pipeline.errors import DomainPackError, ModelCallError
from sim_pipeline.gold import transcript_digest
from sim_pipeline.grade import conduct
from sim_pipeline.grade.grading import GRADE_COLUMNS, combine, grade_rollouts
from sim_pipeline.grade.stress import STRESS_COLUMNS
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.runner import run_rollouts
from sim_pipeline_tests.grade.conftest import POLICY, InProcessGateway


def grade(run, rollouts, judge_model, gateway=None, **options):
    return asyncio.run(grade_rollouts(rollouts, run.situations, domain=options.pop("domain", run.domain),
                                      judge_model=judge_model, gateway=gateway or Gateway(backoff_s=0), **options))


def test_in_process_gateway_gives_the_litellm_transcripts(retail_run):
    specs = retail_run.specs[:6]
    kwargs = {"domain": retail_run.domain, "state": retail_run.state}
    direct = asyncio.run(run_rollouts(specs, POLICY, gateway=InProcessGateway(), **kwargs))
    through = asyncio.run(run_rollouts(specs, POLICY, gateway=Gateway(), **kwargs))
    assert [json.dumps(m, sort_keys=True) for m in direct["messages"]] == [
        json.dumps(m, sort_keys=True) for m in through["messages"]]


def test_in_process_gateway_gives_the_litellm_grades(retail_run, graded):
    rollouts = retail_run.rollouts.iloc[:16]
    through = grade(retail_run, rollouts, "sim/judge-noisy", stress=False)
    direct = grade(retail_run, rollouts, "sim/judge-noisy", InProcessGateway(), stress=False)
    assert through.equals(direct) and through["judge_reward"].notna().all()


def test_grades_table(retail_run, graded):
    table = graded("sim/judge")
    assert list(table.columns) == list(GRADE_COLUMNS)
    assert list(table["rollout_id"]) == sorted(retail_run.rollouts["rollout_id"])
    assert table["judge_version"].str.fullmatch(r"sim/judge@[0-9a-f]{12}").all()
    assert (table["judge_status"] == "ok").all() and (table["gold_source"] == "program").all()
    assert set(table["conduct_rule"].dropna()) <= set(conduct.rule_names())
    assert table.loc[table["conduct_rule"].notna(), "conduct_evidence"].str.len().min() > 0
    expected = [combine(c, j) for c, j in zip(table["conduct_reward"], table["judge_reward"])]
    np.testing.assert_array_equal(table["reward"].to_numpy(), np.asarray(expected, dtype=float))
    assert table[list(STRESS_COLUMNS)].notna().any().all()  # every stress test ran on some rows


@pytest.mark.parametrize(("model", "status"), [("scripted/garbage", "invalid_result"),
                                               ("scripted/sometimes-timeout", "timeout"),
                                               ("scripted/sometimes-broken", "error")])
def test_a_failing_judge_is_a_status_never_a_silent_zero(retail_run, scripted_judges, model, status):
    rollouts = retail_run.rollouts.iloc[:30]
    table = grade(retail_run, rollouts, model, stress=False)
    assert set(table["judge_status"]) == {"invalid_result", status} or status == "invalid_result"
    assert (table["judge_status"] == status).any() and table["judge_reward"].isna().all()
    # A failed judge call is not an outcome: ungraded (no reward), even where a conduct rule failed.
    assert table["conduct_rule"].notna().any() and table["conduct_rule"].isna().any()
    assert table["reward"].isna().all() and not table["graded"].any()
    assert table[list(STRESS_COLUMNS)].isna().all().all()


def test_a_judge_that_reads_no_case_is_not_stress_tested_and_is_untrusted(retail_run, scripted_judges):
    # Issue 34: a small real model as judge wrote prose on every case. Probing it would spend hundreds of calls on
    # a judge its failures already refuse.
    from sim_pipeline.grade.judge_trust import judge_trust_report

    rollouts = retail_run.rollouts.iloc[:12]
    before = len(scripted_judges)
    table = grade(retail_run, rollouts, "scripted/garbage")
    assert set(table["judge_status"]) == {"invalid_result"}
    assert len(scripted_judges) - before == len(rollouts)  # one call per case, no re-judge, filler or probe
    assert table[list(STRESS_COLUMNS)].isna().all().all()
    report = judge_trust_report(table, policy_model="sim/agent-v1", judge_model="scripted/garbage")
    assert report.verdict == "untrusted" and "judge_failures" in {flag.name for flag in report.flags}


@pytest.mark.parametrize("model", ["scripted/timeout", "scripted/broken"])
def test_a_judge_whose_every_call_fails_stops_the_grading(retail_run, scripted_judges, model):
    # The breaker opens on 5 failed calls or 15 failed requests in a row, whichever comes first (models/breaker.py).
    with pytest.raises(ModelCallError, match=f"model '{model}': \\d+ requests failed in a row .* circuit breaker"):
        grade(retail_run, retail_run.rollouts.iloc[:30], model, stress=False)


def test_errored_rollouts_are_kept_but_never_graded(retail_run):
    rollouts = retail_run.rollouts.iloc[:12].copy()
    errored = rollouts.index[:5]
    rollouts.loc[errored, "status"] = ["provider_error", "provider_error", "invalid_response", "user_error",
                                       "provider_error"]
    rollouts.loc[errored, "oracle_reward"] = None
    rollouts.loc[errored, "oracle_reason"] = "not graded: provider_error"
    gateway = Gateway(fast_path=True)
    table = grade(rollouts=rollouts, run=retail_run, judge_model="sim/judge", gateway=gateway, stress=False)
    assert len(table) == 12
    bad = table["rollout_id"].isin(rollouts.loc[errored, "rollout_id"])
    assert not table.loc[bad, "graded"].any() and table.loc[bad, "reward"].isna().all()
    assert (table.loc[bad, "judge_status"] == "not_judged").all() and table.loc[bad, "gold_reward"].isna().all()
    assert table.loc[bad, ["conduct_rule", "marker_refusal", "marker_truncated"]].isna().all().all()
    assert table.loc[~bad, "graded"].all() and table.loc[~bad, "reward"].notna().all()
    assert gateway.calls == 7  # the judge was asked about the 7 real outcomes only


def test_judgments_are_cached(retail_run, tmp_path):
    rollouts = retail_run.rollouts.iloc[:20]
    first = Gateway(cache_path=tmp_path / "cache.sqlite")
    a = grade(retail_run, rollouts, "sim/judge", first)
    second = Gateway(cache_path=tmp_path / "cache.sqlite")
    b = grade(retail_run, rollouts, "sim/judge", second)
    assert first.calls > 20 and second.calls == 0 and second.cache_hits == first.calls
    assert a.equals(b)


def write_gold(path, lines):
    (path / "gold").mkdir(parents=True, exist_ok=True)
    (path / "gold" / "labels.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")


def test_human_gold_overrides_program_gold_where_it_matches(retail_run, tmp_path):
    rollouts = retail_run.rollouts.iloc[:20]
    first, second = rollouts.iloc[0], rollouts.iloc[1]
    write_gold(tmp_path, [
        {"situation_id": first["situation_id"], "messages": list(first["messages"]),
         "label": int(1 - first["oracle_reward"]), "labeller": "ana.silva", "source": "human", "note": "disagree"},
        {"situation_id": second["situation_id"], "transcript_sha256": transcript_digest(list(second["messages"])),
         "label": int(second["oracle_reward"]), "labeller": "ben.okafor", "source": "human"},
        {"situation_id": "another-situation", "transcript_sha256": transcript_digest(list(first["messages"])),
         "label": 1, "labeller": "ana.silva", "source": "human"},  # same transcript, other situation: no match
    ])
    domain = dataclasses.replace(retail_run.domain, path=tmp_path)
    table = grade(retail_run, rollouts, "sim/judge", domain=domain, stress=False).set_index("rollout_id")
    human = table[table["gold_source"] == "human"]
    assert set(human.index) == {first["rollout_id"], second["rollout_id"]}
    assert human.loc[first["rollout_id"], "gold_reward"] == 1 - first["oracle_reward"]
    assert human.loc[first["rollout_id"], "gold_reason"] == "human (ana.silva): disagree"
    assert human.loc[second["rollout_id"], "gold_reason"] == "human (ben.okafor)"
    assert (table.drop(human.index)["gold_source"] == "program").all()


def test_program_made_gold_stops_grading(retail_run, tmp_path):
    first = retail_run.rollouts.iloc[0]
    write_gold(tmp_path, [{"situation_id": first["situation_id"], "messages": list(first["messages"]), "label": 1,
                           "labeller": "openai/gpt-4o", "source": "program"}])
    domain = dataclasses.replace(retail_run.domain, path=tmp_path)
    with pytest.raises(DomainPackError, match=r"labels\.jsonl: line 1: source 'program': the row declares a "
                                              r"program-made label"):
        grade(retail_run, retail_run.rollouts.iloc[:2], "sim/judge", domain=domain, stress=False)
