"""DPO pairs: same prompt, margin, closest-length rejected, prompt/completion split, length warning."""

import pandas as pd
import pytest

from sim_pipeline.cut.preference import PAIR_COLUMNS, build_preference_pairs
from sim_pipeline.errors import CutError


def text(n: int) -> str:
    return "x" * n


def test_each_chosen_gets_the_closest_length_rejected(make, to_frames):
    rows = [
        make("s1", sample_index=0, reward=1.0, final_text=text(20)),
        make("s1", sample_index=1, reward=1.0, final_text=text(41)),
        make("s1", sample_index=2, reward=0.0, final_text=text(5)),
        make("s1", sample_index=3, reward=0.0, final_text=text(18)),
        make("s1", sample_index=4, reward=0.0, final_text=text(40)),
    ]
    pairs, meta = build_preference_pairs(*to_frames(rows))
    assert list(pairs.columns) == PAIR_COLUMNS
    assert list(zip(pairs["chosen_rollout_id"], pairs["rejected_rollout_id"], pairs["length_delta"])) == [
        ("s1-p0-s0", "s1-p0-s3", 2),
        ("s1-p0-s1", "s1-p0-s4", 1),
    ]
    assert (pairs["margin"] == 1.0).all() and meta["pairs"] == 2 and meta["prompts"] == 1


def test_a_rejected_row_may_serve_several_chosen_rows_once_each(make, to_frames):
    rows = [make("s1", sample_index=k, reward=1.0, final_text=text(10 + k)) for k in range(3)]
    rows.append(make("s1", sample_index=9, reward=0.0, final_text=text(11)))
    pairs, _ = build_preference_pairs(*to_frames(rows))
    assert pairs["rejected_rollout_id"].tolist() == ["s1-p0-s9"] * 3
    assert not pairs.duplicated(["chosen_rollout_id", "rejected_rollout_id"]).any()


def test_margin_one_pairs_pass_over_fail_and_half_admits_partial_credit(make, to_frames):
    rows = [
        make("s1", sample_index=0, reward=1.0),
        make("s1", sample_index=1, reward=0.5, final_text=text(24)),
        make("s1", sample_index=2, reward=0.0, final_text=text(60)),
    ]
    strict, _ = build_preference_pairs(*to_frames(rows))
    assert strict[["chosen_reward", "rejected_reward"]].values.tolist() == [[1.0, 0.0]]
    partial, _ = build_preference_pairs(*to_frames(rows), margin=0.5)
    # Chosen s0 (24 chars) prefers the 0.5 row (24 chars); the 0.5 row is chosen over the 0 row.
    assert partial[["chosen_rollout_id", "rejected_rollout_id", "margin"]].values.tolist() == [
        ["s1-p0-s0", "s1-p0-s1", 0.5],
        ["s1-p0-s1", "s1-p0-s2", 0.5],
    ]
    for bad in (0.0, 1.5, float("nan")):
        with pytest.raises(CutError, match="margin must lie"):
            build_preference_pairs(*to_frames(rows), margin=bad)


def test_pairs_stay_within_one_situation_and_phrasing(make, to_frames):
    rows = [
        make("s1", phrasing_index=0, reward=1.0),
        make("s1", phrasing_index=1, reward=0.0),
        make("s2", phrasing_index=0, reward=0.0),
    ]
    pairs, meta = build_preference_pairs(*to_frames(rows))
    assert pairs.empty and list(pairs.columns) == PAIR_COLUMNS and meta["chosen_longer_share"] is None


def test_prompt_is_up_to_first_user_turn_and_sides_are_the_rest(make, to_frames):
    rows = [make("s1", sample_index=0, reward=1.0, extra_turns=1), make("s1", sample_index=1, reward=0.0)]
    pairs, _ = build_preference_pairs(*to_frames(rows))
    row = pairs.iloc[0]
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert [m["role"] for m in row["chosen"]] == ["assistant", "user", "assistant", "tool", "assistant"]
    assert [m["role"] for m in row["rejected"]] == ["assistant", "tool", "assistant"]
    assert row["rejected"][-1]["content"] == "Your order is cancelled."
    assert row["sampling"]["seed"] == 0 and row["seed"] == 0 and row["policy_version"] == "v1"


@pytest.mark.parametrize(("n_pairs", "n_longer", "warns"), [(8, 6, True), (8, 5, False), (7, 7, False)])
def test_length_bias_warning_needs_75_percent_of_at_least_8_pairs(make, to_frames, n_pairs, n_longer, warns):
    rows = []
    for i in range(n_pairs):
        longer = i < n_longer
        rows.append(make(f"s{i}", sample_index=0, reward=1.0, final_text=text(30 if longer else 10)))
        rows.append(make(f"s{i}", sample_index=1, reward=0.0, final_text=text(20)))
    pairs, meta = build_preference_pairs(*to_frames(rows))
    assert len(pairs) == n_pairs
    assert meta["chosen_longer_share"] == pytest.approx(n_longer / n_pairs)
    assert (meta["length_bias_warning"] is not None) == warns


def test_deterministic_and_sorted(make, to_frames):
    rows = [make(f"s{i % 3}", phrasing_index=i % 2, sample_index=i, reward=float(i % 4 < 2),
                 final_text=text(5 + 7 * i % 13)) for i in range(24)]
    rollouts, grades = to_frames(rows)
    first, _ = build_preference_pairs(rollouts, grades)
    again, _ = build_preference_pairs(rollouts.iloc[::-1], grades.sample(frac=1, random_state=3))
    pd.testing.assert_frame_equal(first, again)
    keys = list(first[["situation_id", "phrasing_index", "chosen_rollout_id"]].itertuples(index=False))
    assert keys == sorted(keys) and len(first) > 0
