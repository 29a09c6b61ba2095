import pandas as pd

from sim_pipeline.cut import pool as pool_module
from sim_pipeline.cut.cuts import CUTS, build_cut
from sim_pipeline.cut.pool import train_pool


def _cuts(rollouts, grades, tools, key):
    return {name: build_cut(name, rollouts, grades, tools=tools, judge_trusted=True, opt_out=False, pool_key=key)
            for name in CUTS}


def _rows(make, to_frames):
    pairs = [make(f"s{i}", sample_index=j, reward=float((i + j) % 2), final_text="Done." * (j + 1))
             for i in range(3) for j in range(3)]
    pairs.append(make("s9", split="heldout"))
    return to_frames(pairs)


def test_the_cuts_of_one_partition_share_one_pool_and_cut_the_same_rows(make, to_frames, tools, monkeypatch):
    rollouts, grades = _rows(make, to_frames)
    alone = _cuts(rollouts, grades, tools, None)
    built = []
    compute = pool_module._train_pool
    monkeypatch.setattr(pool_module, "_train_pool", lambda *a, **k: built.append(1) or compute(*a, **k))
    shared = _cuts(rollouts, grades, tools, ("rollouts-sha", "grades-sha"))
    assert len(built) == 1  # five cuts, one conversion
    for name in CUTS:
        pd.testing.assert_frame_equal(shared[name].table, alone[name].table)
        assert shared[name].metadata == alone[name].metadata
    assert len(alone["sft"].table) and len(alone["preference_pairs"].table)  # the comparison saw rows


def test_a_pool_from_the_cache_is_a_copy_and_another_key_builds_anew(make, to_frames, monkeypatch):
    rollouts, grades = _rows(make, to_frames)
    first = train_pool(rollouts, grades, key="k1")
    first.rows["reward"] = -1.0  # a cut editing its pool
    first.removed["heldout"] = 99
    again = train_pool(rollouts, grades, key="k1")
    assert (again.rows["reward"] >= 0).all() and again.removed["heldout"] == 0
    built = []
    compute = pool_module._train_pool
    monkeypatch.setattr(pool_module, "_train_pool", lambda *a, **k: built.append(1) or compute(*a, **k))
    train_pool(rollouts.iloc[:3], grades, key="k2")  # other content, other key
    train_pool(rollouts, grades, key="k2", heldout_situation_ids={"s0"})  # other held-out set
    assert len(built) == 2
