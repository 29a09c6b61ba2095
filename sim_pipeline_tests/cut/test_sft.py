"""SFT cut: loss mask, wire format, best row per prompt, signature spread, determinism."""

import json

import pandas as pd
import pytest

from sim_pipeline.cut.sft import SFT_COLUMNS, select_for_sft
from sim_pipeline.errors import CutError


def test_loss_mask_is_one_on_assistant_turns_only(make, to_frames, tools):
    rollouts, grades = to_frames([make("s1", extra_turns=1)])
    messages = select_for_sft(rollouts, grades, tools=tools).loc[0, "messages"]
    assert [m["weight"] for m in messages] == [int(m["role"] == "assistant") for m in messages]
    roles = [m["role"] for m in messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "tool", "assistant"]
    assert messages[-1]["role"] == "assistant"


def test_tool_calls_survive_in_openai_wire_format(make, to_frames, tools):
    rollouts, grades = to_frames([make("s1")])
    cut = select_for_sft(rollouts, grades, tools=tools)
    messages = cut.loc[0, "messages"]
    call_message = next(m for m in messages if m["tool_calls"])
    (call,) = call_message["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "cancel_order"
    assert json.loads(call["function"]["arguments"]) == {"order_id": "A1001"}
    tool_message = next(m for m in messages if m["role"] == "tool")
    assert tool_message["tool_call_id"] == call["id"] and tool_message["name"] == "cancel_order"
    keys = {"role", "content", "tool_calls", "tool_call_id", "name", "weight"}
    assert all(set(m) == keys for m in messages)
    assert json.loads(cut.loc[0, "tools"]) == tools


def test_best_row_per_prompt_is_fewest_turns_then_tokens_then_id(make, to_frames, tools):
    rows = [
        make("s1", sample_index=0, extra_turns=1, n_tokens=10),
        make("s1", sample_index=1, n_tokens=90),
        make("s1", sample_index=2, n_tokens=80),
        make("s1", sample_index=3, n_tokens=80),
        make("s1", sample_index=4, n_tokens=5, reward=0.0),  # shortest, but failed
        make("s1", phrasing_index=1, sample_index=0, reward=0.5),  # partial credit is not a pass
        make("s2", sample_index=0, split="heldout"),
    ]
    cut = select_for_sft(*to_frames(rows), tools=tools)
    assert cut["rollout_id"].tolist() == ["s1-p0-s2"]
    assert list(cut.columns) == SFT_COLUMNS
    assert cut.loc[0, "reward"] == 1.0 and cut.loc[0, "judge_version"].startswith("sim/judge@")


def test_unusable_statuses_are_never_imitated(make, to_frames, tools):
    rows = [
        make("s1", status="turn_cap"),
        make("s2", status="provider_error"),
        make("s3", judge_status="error"),
        make("s4"),
    ]
    assert select_for_sft(*to_frames(rows), tools=tools)["situation_id"].tolist() == ["s4"]


def test_cap_per_situation_prefers_unseen_signatures(make, to_frames, tools):
    # The three best prompts share signature a; the cap of 2 should take one a and the best other.
    rows = [
        make("s1", phrasing_index=0, n_tokens=10, signature="a"),
        make("s1", phrasing_index=1, n_tokens=11, signature="a"),
        make("s1", phrasing_index=2, n_tokens=12, signature="a"),
        make("s1", phrasing_index=3, n_tokens=40, signature="b"),
        make("s1", phrasing_index=4, n_tokens=30, signature="c"),
    ]
    cut = select_for_sft(*to_frames(rows), tools=tools, max_per_situation=2)
    assert cut["rollout_id"].tolist() == ["s1-p0-s0", "s1-p4-s0"]
    uncapped = select_for_sft(*to_frames(rows), tools=tools, max_per_situation=None)
    assert len(uncapped) == 5
    with pytest.raises(CutError, match="max_per_situation"):
        select_for_sft(*to_frames(rows), tools=tools, max_per_situation=0)


def test_same_input_same_output_whatever_the_row_order(make, to_frames, tools):
    rows = [make(f"s{i}", phrasing_index=p, sample_index=k, reward=float((i + k) % 2), n_tokens=50 + k)
            for i in range(6) for p in range(2) for k in range(3)]
    rollouts, grades = to_frames(rows)
    first = select_for_sft(rollouts, grades, tools=tools)
    shuffled = select_for_sft(rollouts.sample(frac=1, random_state=1), grades.sample(frac=1, random_state=2),
                              tools=tools)
    pd.testing.assert_frame_equal(first, shuffled)
    columns = ["policy_version", "seed", "situation_id", "phrasing_index", "rollout_id"]
    keys = list(first[columns].itertuples(index=False))
    assert keys == sorted(keys)


def test_parquet_round_trip_in_and_out(make, to_frames, tools, tmp_path):
    rollouts, grades = to_frames([make("s1"), make("s2", extra_turns=2)])
    rollouts.to_parquet(tmp_path / "rollouts.parquet")
    read_back = pd.read_parquet(tmp_path / "rollouts.parquet")
    assert not isinstance(read_back.loc[0, "messages"], list)  # numpy array of dicts, as the contract warns
    cut = select_for_sft(read_back, grades, tools=tools)
    pd.testing.assert_frame_equal(cut, select_for_sft(rollouts, grades, tools=tools))
    cut.to_parquet(tmp_path / "sft.parquet")
    assert len(pd.read_parquet(tmp_path / "sft.parquet")) == 2


def test_empty_input_gives_empty_frame_with_columns(make, to_frames, tools):
    cut = select_for_sft(*to_frames([make("s1", reward=0.0)]), tools=tools)
    assert cut.empty and list(cut.columns) == SFT_COLUMNS


def test_a_refused_call_is_never_imitated():
    # Regression: a passing conversation that recovered from a placeholder call taught the placeholder call.
    from sim_pipeline.cut.sft import _with_loss_mask

    call = {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "<order_id>"}'}}
    good = {"id": "c2", "type": "function", "function": {"name": "get_order", "arguments": '{"order_id": "4821"}'}}
    messages = [
        {"role": "user", "content": "where is my order 4821?", "tool_calls": None},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"status": "rejected", "error": "placeholder_argument"}'},
        {"role": "assistant", "content": None, "tool_calls": [good]},
        {"role": "tool", "tool_call_id": "c2", "content": '{"status": "ok"}'},
        {"role": "assistant", "content": "It shipped.", "tool_calls": None},
    ]
    assert [m["weight"] for m in _with_loss_mask(messages)] == [0, 0, 0, 1, 0, 1]
