"""Reward-model set: every graded train row pointwise, every pair of a prompt whose rewards differ pairwise."""

import pandas as pd

from sim_pipeline.cut.reward_model import PAIRWISE_COLUMNS, POINTWISE_COLUMNS, reward_model_set


def test_pointwise_keeps_every_graded_train_row(make, to_frames):
    rows = [
        make("s1", sample_index=0, reward=1.0),
        make("s1", sample_index=1, reward=0.5),
        make("s1", sample_index=2, reward=0.0, status="agent_error"),  # a real negative
        make("s1", sample_index=3, reward=0.0, judge_status="error"),  # no reward to learn
        make("s1", sample_index=4, reward=0.0, status="provider_error"),  # not the policy's doing
        make("s2", sample_index=0, reward=1.0, split="heldout"),
    ]
    pointwise, _ = reward_model_set(*to_frames(rows))
    assert list(pointwise.columns) == POINTWISE_COLUMNS
    assert pointwise["rollout_id"].tolist() == ["s1-p0-s0", "s1-p0-s1", "s1-p0-s2"]
    assert pointwise["reward"].tolist() == [1.0, 0.5, 0.0]


def test_pairwise_is_every_pass_fail_pair_within_a_prompt(make, to_frames):
    rows = [make("s1", sample_index=k, reward=r) for k, r in enumerate([1.0, 1.0, 0.0, 0.0, 0.0, 0.5])]
    rows += [make("s1", phrasing_index=1, reward=0.0), make("s2", reward=1.0)]
    _, pairwise = reward_model_set(*to_frames(rows), margin=1.0)
    assert list(pairwise.columns) == PAIRWISE_COLUMNS
    assert len(pairwise) == 2 * 3  # two passes times three fails, nothing across prompts
    assert (pairwise["chosen_reward"] == 1.0).all() and (pairwise["rejected_reward"] == 0.0).all()
    assert set(pairwise["chosen_rollout_id"]) == {"s1-p0-s0", "s1-p0-s1"}
    _, graded = reward_model_set(*to_frames(rows))  # the default admits partial credit, with its margin
    assert len(graded) == 2 * 3 + 2 + 3  # plus pass over 0.5 and 0.5 over fail
    assert graded["margin"].tolist() == (graded["chosen_reward"] - graded["rejected_reward"]).tolist()
    assert sorted(graded["margin"].unique()) == [0.5, 1.0]


def test_deterministic(make, to_frames):
    rows = [make(f"s{i % 4}", sample_index=i, reward=float(i % 3 == 0)) for i in range(20)]
    rollouts, grades = to_frames(rows)
    a = reward_model_set(rollouts, grades)
    b = reward_model_set(rollouts.sample(frac=1, random_state=0), grades.iloc[::-1])
    for left, right in zip(a, b, strict=True):
        pd.testing.assert_frame_equal(left, right)
