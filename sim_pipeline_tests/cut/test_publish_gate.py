"""Publish gate: a clean cut passes; each refusal fires alone and names its fix."""

import json

import pandas as pd
import pytest

from sim_pipeline import defaults
from sim_pipeline.cut.groups import select_for_rl
from sim_pipeline.cut.preference import build_preference_pairs
from sim_pipeline.cut.publish_gate import GateResult, publish_gate
from sim_pipeline.cut.reward_model import reward_model_set
from sim_pipeline.cut.sft import select_for_sft
from sim_pipeline.errors import CutError

HELDOUT_OPENING = "I want to cancel my order because it arrived broken and late today"


@pytest.fixture
def data(make, to_frames):
    rows = []
    for i in range(3):
        for k, reward in enumerate([1.0, 0.0, 1.0, 0.0]):
            rows.append(make(f"s{i}", sample_index=k, reward=reward, final_text="ok" * (k + 1)))
    rows.append(make("h0", split="heldout", opening=HELDOUT_OPENING))
    return to_frames(rows)


def gate(cut, kind, grades, **overrides):
    options = {"judge_trusted": True, "opt_out": False, "heldout_situation_ids": {"h0"},
               "heldout_openings": [HELDOUT_OPENING], "group_stats": None, **overrides}
    return publish_gate(cut, kind=kind, grades=grades, **options)


def single_reason(result: GateResult, fragment: str) -> None:
    assert not result.passed
    assert len(result.reasons) == 1 and fragment in result.reasons[0], result.reasons


def test_clean_cuts_of_every_kind_pass(data, tools):
    rollouts, grades = data
    groups, stats = select_for_rl(rollouts, grades)
    pointwise, pairwise = reward_model_set(rollouts, grades)
    cuts = {
        "sft": select_for_sft(rollouts, grades, tools=tools),
        "preference": build_preference_pairs(rollouts, grades)[0],
        "grpo": groups,
        "reward_model": pointwise,
    }
    for kind, cut in cuts.items():
        assert len(cut) > 0
        assert gate(cut, kind, grades, group_stats=stats) == GateResult(passed=True, reasons=())
    assert gate(pairwise, "reward_model", grades).passed


def test_empty_sft_passes_but_empty_grpo_has_no_mixed_group(data, tools):
    rollouts, grades = data
    empty_sft = select_for_sft(rollouts.iloc[:0], grades.iloc[:0], tools=tools)
    assert gate(empty_sft, "sft", grades) == GateResult(passed=True, reasons=())
    empty_grpo, stats = select_for_rl(rollouts.iloc[:0], grades.iloc[:0])
    single_reason(gate(empty_grpo, "grpo", grades, group_stats=stats), "no mixed group")


def test_refuses_empty_grades(data, tools):
    rollouts, grades = data
    cut = select_for_sft(rollouts, grades, tools=tools)
    single_reason(gate(cut, "sft", grades.iloc[:0]), "grades table is empty")


def test_refuses_rows_without_a_standing_grade(data, tools):
    rollouts, grades = data
    cut = select_for_sft(rollouts, grades, tools=tools)
    single_reason(gate(cut, "sft", grades[grades["rollout_id"] != cut.loc[0, "rollout_id"]]), "have no grade")
    errored = grades.assign(judge_status=grades["judge_status"].where(
        grades["rollout_id"] != cut.loc[0, "rollout_id"], "error"))
    single_reason(gate(cut, "sft", errored), "re-run the judge")


def test_refuses_a_cut_that_no_longer_matches_its_grades(data):
    rollouts, grades = data
    pairs, _ = build_preference_pairs(rollouts, grades)
    single_reason(gate(pairs.assign(rejected_reward=0.5), "preference", grades), "reward that differs")
    single_reason(gate(pairs.assign(judge_version="other@000"), "preference", grades), "judge_version")


def test_refuses_an_untrusted_judge_unless_opted_out(data, tools):
    rollouts, grades = data
    cut = select_for_sft(rollouts, grades, tools=tools)
    single_reason(gate(cut, "sft", grades, judge_trusted=False), "opt-out")
    assert gate(cut, "sft", grades, judge_trusted=False, opt_out=True).passed


def test_refuses_grpo_without_mixed_group_or_with_a_split_group(data, make, to_frames):
    rollouts, grades = data
    groups, stats = select_for_rl(rollouts, grades)
    all_pass = groups.assign(reward=1.0)
    assert "no mixed group" in " ".join(gate(all_pass, "grpo", grades).reasons)
    single_reason(gate(groups, "grpo", grades, group_stats={**stats, "mixed": 0}), "no mixed group")
    single_reason(gate(groups.iloc[1:], "grpo", grades), "split")


def test_refuses_heldout_leaks_by_id_by_gram_and_by_grade_split(data, make, to_frames, tools):
    rollouts, grades = data
    cut = select_for_sft(rollouts, grades, tools=tools)
    single_reason(gate(cut, "sft", grades, heldout_situation_ids={"s1"}), "held-out situations")
    leaked = cut.copy()
    leaked.at[0, "messages"] = [dict(m) for m in leaked.loc[0, "messages"]]
    leaked.loc[0, "messages"][1]["content"] = "Hello! " + HELDOUT_OPENING.upper()
    single_reason(gate(leaked, "sft", grades), f"{defaults.DECONTAMINATION_NGRAM}-word run")
    relabelled = grades.assign(split=grades["split"].where(grades["situation_id"] != "s2", "heldout"))
    single_reason(gate(cut, "sft", relabelled), "graded as held-out")


@pytest.mark.parametrize("where", ["tool_content", "tool_arguments", "system_prompt"])
def test_refuses_judge_only_text_anywhere_in_a_training_row(data, where):
    rollouts, grades = data
    marker = f"{defaults.JUDGE_ONLY_MARKER} Rubric: pass if the agent confirms. <</judge-only>>"

    def tamper(messages):
        messages = [dict(m) for m in messages]
        if where == "tool_content":
            messages[3]["content"] = json.dumps({"status": "ok", "note": marker})
        elif where == "tool_arguments":
            call = messages[2]["tool_calls"][0]
            arguments = json.dumps({"x": marker})
            messages[2]["tool_calls"] = [{**call, "function": {**call["function"], "arguments": arguments}}]
        else:
            messages[0]["content"] += " [[JUDGE-ONLY]]"
        return messages

    # The system prompt is shared by a prompt's samples, so it is tampered in all of them.
    tampered = rollouts.index[:1] if where != "system_prompt" else rollouts.index
    rollouts["messages"] = [tamper(m) if i in tampered else m for i, m in rollouts["messages"].items()]
    pairs, _ = build_preference_pairs(rollouts, grades)
    single_reason(gate(pairs, "preference", grades), "judge-only text")


def test_rejects_an_unknown_kind_or_a_frame_that_is_not_a_cut(data, tools):
    rollouts, grades = data
    cut = select_for_sft(rollouts, grades, tools=tools)
    with pytest.raises(CutError, match="unknown cut kind 'dpo'"):
        gate(cut, "dpo", grades)
    with pytest.raises(CutError, match="rollout id column"):
        gate(cut.drop(columns=["rollout_id"]), "sft", grades)


def test_gates_a_cut_read_back_from_parquet(data, tmp_path):
    rollouts, grades = data
    groups, stats = select_for_rl(rollouts, grades)
    groups.to_parquet(tmp_path / "grpo.parquet")
    read_back = pd.read_parquet(tmp_path / "grpo.parquet")
    assert gate(read_back, "grpo", grades, group_stats=stats).passed
    read_back.at[0, "completion"][0]["content"] = defaults.JUDGE_ONLY_MARKER
    single_reason(gate(read_back, "grpo", grades), "judge-only text")
