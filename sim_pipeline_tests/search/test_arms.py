"""What the arms draw: variants about records not used yet, writer cards that leave out an id the agent can look up,
writer cells where no draw has been."""

import asyncio
import collections

import numpy as np

from sim_pipeline import defaults
from sim_pipeline.domain import load_domain
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.search.arms import ARMS, Arms, SearchContext, cell_pairs, cell_of
from sim_pipeline_tests.rollout.small_run import seed_world, world
from sim_pipeline_tests.world.conftest import write_pharmacy_pack


def arms(gateway=None):
    domain, state, situations = world()
    return Arms(SearchContext(domain, state, 0, [s for s in situations if s.split == "train"], gateway))


def test_variants_avoid_records_already_used_for_the_same_request():
    drawn = arms()
    used = {(s.intent_tool, s.entity_id) for s in drawn.ctx.train if s.entity_id}
    cell = next(cell_of(s) for s in drawn.ctx.train if s.entity_id and s.intent_tool == "cancel_order")
    made = [drawn._variant(cell, "structured") for _ in range(8)]
    keys = [(s.intent_tool, s.entity_id) for s in made]
    assert len(set(keys)) == len(keys) and not set(keys) & used  # retail has records enough for eight new ones
    assert len({s.situation_id for s in made}) == len(made)


def test_a_cell_that_can_only_repeat_still_draws_after_its_tries():
    drawn = arms()
    cell = next(cell_of(s) for s in drawn.ctx.train if s.intent_tool is None)  # off-topic: no record at all
    before = drawn.archive.variants[cell]
    made = [drawn._variant(cell, "structured") for _ in range(3)]
    assert all(s.intent_tool is None for s in made)
    assert drawn.archive.variants[cell] - before <= 3 * defaults.SEARCH_VARIANT_TRIES


def test_the_writer_is_told_no_id_it_can_look_up_so_the_agent_must_look_the_record_up():
    drawn = arms(Gateway(fast_path=True))
    situations = asyncio.run(drawn.llm_guided(40, np.random.default_rng(0)))
    shown = collections.Counter()
    for s in situations:
        if s.entity_id and "email" in s.facts and s.cell["stance"] not in ("ambiguous", "unsure", "exploratory", "mistaken"):
            shown[s.entity_id in s.phrasings[0]] += 1
            if s.entity_id not in s.phrasings[0]:
                assert s.facts["email"] in s.phrasings[0] and "order_id" not in s.opening_facts
    assert shown[False] >= 5 and not shown[True]  # the template openings (structured arm) carry the id


def test_the_writer_goes_where_no_draw_has_been():
    # Each llm_guided cell is, at its turn, one adding the most axis-value pairs that no situation drawn before it (by
    # any arm, this batch's included) had: with cells at random among the under-filled, the test fails.
    drawn, gen = arms(), np.random.default_rng(0)
    registry = {a.name: a for a in ARMS}
    covered = set()
    for situation in asyncio.run(drawn.draw(registry["structured"], 4, gen)):
        covered |= cell_pairs(cell_of(situation))
    for situation in asyncio.run(drawn.draw(registry["llm_guided"], 6, gen)):
        best = max(len(cell_pairs(c) - covered) for c in drawn.planned)
        assert len(cell_pairs(cell_of(situation)) - covered) == best > 0
        covered |= cell_pairs(cell_of(situation))


def test_a_pack_without_a_look_up_field_keeps_the_id_in_every_writer_opening(tmp_path):
    # The pharmacy pack written here (camelCase tools, RX-123456 ids) has no field that finds a prescription: a
    # customer must give its number, so the writer never leaves it out.
    domain, state, situations = seed_world(load_domain(write_pharmacy_pack(tmp_path)))
    train = [s for s in situations if s.split == "train"]
    drawn = Arms(SearchContext(domain, state, 0, train))
    with_id = [s for s in train if "rxNumber" in s.opening_facts]
    assert with_id
    for situation in with_id:
        assert drawn._shared(situation) == tuple(k for k in situation.opening_facts if k in situation.facts)
        assert "rxNumber" in drawn._shared(situation)
