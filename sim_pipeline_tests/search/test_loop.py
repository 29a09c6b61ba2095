"""The search: weights follow the arm that finds new behaviour, saturation stops early, same seed same search."""

import asyncio
import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim_pipeline import defaults
from sim_pipeline.axes import axis_values
from sim_pipeline.cover import covering_array
from sim_pipeline.domain import load_domain
from sim_pipeline.search.arms import SearchContext
from sim_pipeline.search.loop import SearchSettings, final_weights, kinds_opened, run_search
from sim_pipeline.search.situations import build_situations
from sim_pipeline.search.weights import WeightRule
from sim_pipeline.situation import Situation
from sim_pipeline.world.state import build_state
from sim_pipeline_tests.rollout.small_run import seed_world
from sim_pipeline_tests.world.conftest import write_pharmacy_pack

DOMAIN = load_domain("retail")
STATE = build_state(DOMAIN, 0)


def train_situations(limit=None):
    cells = covering_array(axis_values(DOMAIN), seed=0, constraints=DOMAIN.constraints)
    table = build_situations(DOMAIN, STATE, cells, seed=0, n_phrasings=1)
    train = [Situation.from_row(r) for r in table.to_dict("records") if r["split"] == "train"]
    return train[:limit] if limit else train


QUESTION = [{"role": "user", "content": "Hello, I need help with my order."},
            {"role": "assistant", "content": "Could you tell me your order number?"}]  # no conduct rule fires on it


def fake_runner(novel_arm=None, variant_arm=None):
    """Two rollouts per situation, the second failing; a situation drawn by `novel_arm` fails in a new kind (an oracle
    check never seen) with a never-seen signature, one drawn by `variant_arm` in one known kind with a never-seen
    signature; every other failure is the same known one."""
    counter = itertools.count()

    async def run_batch(situations, batch):
        rows = []
        for s in situations:
            for k in range(2):
                n = next(counter)
                signature = f"new-{n}" if s.source in (novel_arm, variant_arm) else "same"
                check = f"check_{n}" if s.source == novel_arm else "never_applied"
                rows.append({"rollout_id": f"{batch:04d}-{s.situation_id}-{k}", "situation_id": s.situation_id,
                             "behavior_signature": signature, "oracle_reward": float(k == 0),
                             "oracle_check": "" if k == 0 else check, "status": "ok", "messages": QUESTION,
                             "final_text": QUESTION[-1]["content"], "tool_events": [], "user_events": []})
        return pd.DataFrame(rows)

    return run_batch


def search(novel_arm=None, train=None, variant_arm=None, world=(DOMAIN, STATE), **kwargs):
    ctx = SearchContext(*world, 0, train if train is not None else train_situations())
    return asyncio.run(run_search(ctx, fake_runner(novel_arm, variant_arm), SearchSettings(**kwargs)))


def test_the_productive_grid_arm_takes_the_largest_share_and_the_rest_fall_to_floors():
    table, _, _ = search("llm_guided", budget_rows=600, cell_target=99, patience=99)
    weights = final_weights(table)
    assert weights["llm_guided"] == max(weights.values()) > 0.7
    for arm in ("structured", "open_ended", "behavior_targeted", "failure_mutation"):
        assert weights[arm] == pytest.approx(WeightRule().floors[arm], abs=1e-6)


def test_an_arm_that_opens_kinds_outearns_one_that_adds_ways_of_failing_in_a_known_kind():
    # Both grid arms find a never-seen signature in every failure (the old credit paid them alike); only
    # llm_guided's open new kinds of failure.
    table, _, _ = search("llm_guided", variant_arm="structured", budget_rows=600, cell_target=99, patience=99)
    weights = final_weights(table)
    assert weights["llm_guided"] > 0.7 and weights["structured"] < 0.2
    opened = kinds_opened(table)  # the search asset's metadata: kinds of failure each arm met first
    assert opened["llm_guided"] > 10 * opened["structured"] > 0


def test_a_productive_rare_arm_rises_to_its_cap():
    table, _, _ = search("open_ended", budget_rows=600, cell_target=99, patience=99)
    assert final_weights(table)["open_ended"] == pytest.approx(WeightRule().caps["open_ended"])
    # It can dip for a batch in which it drew no slot (it then gets the batch's mean yield), never far.
    assert table.groupby("batch")["w_open_ended"].first().tail(10).mean() > 0.095


def test_saturation_stops_a_small_grid_early_with_the_reason():
    table, rows, reason = search(None, train=train_situations(6), budget_rows=10_000, cell_target=99, patience=3)
    assert reason.startswith("saturation: 3 batches in a row below yield")
    assert len(rows) < 10_000 and (table["stop_reason"] == reason).all()


def test_filled_grid_stops_the_search():
    _, _, reason = search(None, train=train_situations(4), budget_rows=10_000, cell_target=2, patience=99)
    assert reason == "filled: every planned cell has >= 2 rows"


def test_same_seed_same_search():
    a, _, _ = search("failure_mutation", budget_rows=120)
    b, _, _ = search("failure_mutation", budget_rows=120)
    pd.testing.assert_frame_equal(a, b)
    assert set(a["arm"]) >= {"structured", "llm_guided"} and a["situation_id"].is_unique


def test_another_stream_redraws_the_search_on_the_same_world_and_plan(tmp_path):
    # bench_search re-draws the search this way to measure how much a figure owes to one draw; the pharmacy pack is
    # written here in another hand (camelCase tools, RX-123456 ids)
    for domain, state, situations in (seed_world(DOMAIN), seed_world(load_domain(write_pharmacy_pack(tmp_path)))):
        train = [s for s in situations if s.split == "train"]
        a, again, other = (search("failure_mutation", train, world=(domain, state), budget_rows=120, **stream)[0]
                           for stream in ({}, {"stream": defaults.SEARCH_STREAM}, {"stream": "search-2"}))
        pd.testing.assert_frame_equal(a, again)
        assert list(other["situation_id"]) != list(a["situation_id"])
        planned = {s.situation_id for s in train}
        assert planned & set(other["situation_id"]) and planned & set(a["situation_id"])  # the same plan under both


def test_every_arm_writes_situations_that_round_trip():
    table, _, _ = search("failure_mutation", budget_rows=400, cell_target=99, patience=99)
    assert set(table["arm"]) == set(defaults.SEARCH_ARMS)
    for row in table.to_dict("records"):
        situation = Situation.from_row(row)
        assert situation.phrasings and situation.situation_id == row["situation_id"]
    probes = table[table["arm"] == "open_ended"]
    assert probes["kind"].notna().all() and probes["parent"].notna().all()


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(0.001, 5.0), min_size=5, max_size=5), st.lists(st.floats(0.0, 3.0), min_size=5, max_size=5))
def test_weight_updates_stay_inside_floors_and_caps(start, yields):
    rule = WeightRule()
    w = rule.update(np.array(start), dict(zip(rule.arms, yields)))
    assert w.sum() == pytest.approx(1.0)
    for arm, value in zip(rule.arms, w):
        assert rule.floors[arm] - 1e-9 <= value <= rule.caps[arm] + 1e-9
