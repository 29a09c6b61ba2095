"""GRPO cut: whole groups only, mixed groups in the pass-rate band, fault kinds interleaved."""

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_pipeline.cut.groups import GRPO_COLUMNS, select_for_rl


def group(make, situation_id, rewards, **keys):
    return [make(situation_id, sample_index=k, reward=r, **keys) for k, r in enumerate(rewards)]


def test_keeps_whole_groups_whose_pass_rate_is_in_band(make, to_frames):
    rows = [
        *group(make, "all_fail", [0, 0, 0, 0]),
        *group(make, "quarter", [1, 0, 0, 0]),
        *group(make, "half", [1, 1, 0.5, 0]),
        *group(make, "three_q", [1, 1, 1, 0]),
        *group(make, "all_pass", [1, 1, 1, 1]),
        *group(make, "fifth", [1, 0, 0, 0, 0]),  # 0.2 is inside the closed band
        *group(make, "eighth", [1, 0, 0, 0, 0, 0, 0, 0]),  # mixed, but 0.125 is below it
        *group(make, "single", [1]),
    ]
    cut, meta = select_for_rl(*to_frames(rows))
    assert list(cut.columns) == GRPO_COLUMNS
    assert sorted(cut["situation_id"].unique()) == ["fifth", "half", "quarter", "three_q"]
    assert meta == {
        "groups": 8, "incomplete": 0, "too_small": 1, "mixed": 5, "all_pass": 1, "all_fail": 1,
        "in_band": 4, "removed": meta["removed"], "rows": 17,
    }
    per_group = cut.groupby("group_id").agg(rows=("rollout_id", "size"), size=("group_size", "first"),
                                            rate=("group_pass_rate", "first"), mean=("reward", "mean"))
    assert (per_group["rows"] == per_group["size"]).all()
    assert per_group.loc["v1/0/half/p0", "rate"] == 0.5
    assert [m["role"] for m in cut.loc[0, "prompt"]] == ["system", "user"]
    assert cut.loc[0, "completion"][0]["role"] == "assistant"


def test_a_partly_graded_group_is_dropped_not_split(make, to_frames):
    rows = [*group(make, "s1", [1, 0, 0]), make("s1", sample_index=3, reward=1.0, judge_status="error")]
    rows += group(make, "s2", [1, 0])
    cut, meta = select_for_rl(*to_frames(rows))
    assert set(cut["situation_id"]) == {"s2"} and meta["incomplete"] == 1


def test_groups_are_interleaved_over_fault_kinds(make, to_frames):
    rows = []
    by_condition = {"success": ["a", "b", "c"], "timeout": ["d", "e"], "stale_result": ["f"]}
    for condition, names in by_condition.items():
        for name in names:
            rows += group(make, name, [1, 0], tool_condition=condition)
    cut, _ = select_for_rl(*to_frames(rows))
    order = cut.drop_duplicates("group_id")[["tool_condition", "situation_id"]].values.tolist()
    assert order == [["stale_result", "f"], ["success", "a"], ["timeout", "d"],
                     ["success", "b"], ["timeout", "e"], ["success", "c"]]
    again, _ = select_for_rl(*(frame.iloc[::-1] for frame in to_frames(rows)))
    pd.testing.assert_frame_equal(cut, again)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=1, max_size=8), min_size=1, max_size=8),
       st.sets(st.integers(0, 63), max_size=6))
def test_never_splits_a_group_and_keeps_only_mixed_groups_in_band(make, to_frames, groups, ungraded):
    rows = []
    for g, rewards in enumerate(groups):
        for k, reward in enumerate(rewards):
            status = "error" if g * 8 + k in ungraded else "ok"
            rows.append(make(f"s{g}", sample_index=k, reward=reward, judge_status=status))
    cut, meta = select_for_rl(*to_frames(rows))
    for situation_id, kept in cut.groupby("situation_id"):
        rewards = groups[int(situation_id[1:])]
        passes = sum(r == 1.0 for r in rewards)
        assert len(kept) == len(rewards) == kept["group_size"].iloc[0]
        assert 0 < passes < len(rewards) and 0.2 <= passes / len(rewards) <= 0.8
        assert not any(int(situation_id[1:]) * 8 + k in ungraded for k in range(len(rewards)))
    expected = {
        f"s{g}" for g, rewards in enumerate(groups)
        if len(rewards) >= 2 and 0.2 <= sum(r == 1.0 for r in rewards) / len(rewards) <= 0.8
        and not any(g * 8 + k in ungraded for k in range(len(rewards)))
    }
    assert set(cut["situation_id"]) == expected
    assert meta["in_band"] == cut["group_id"].nunique()
