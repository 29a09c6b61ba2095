"""Mutation tests of the state oracle on every shipped pack and on a pack in another style: every mutant a careful
reader fails is labelled 0, every mutant that does the same thing another way keeps its pass, and the good embedded
judge (without its slips) reads the same verdicts from the transcript alone."""

from collections import Counter, defaultdict

import pytest

from sim_pipeline import cover
from sim_pipeline.axes import axis_values, validated_constraints
from sim_pipeline.domain import load_domain
from sim_pipeline.grade.judge import case_card
from sim_pipeline.models.sim_judge import outcome
from sim_pipeline.search.situations import build_situation
from sim_pipeline.world.state import build_state
from sim_pipeline_tests.world.mutants import KEPT, KILLED, mutants, passing_scripts, play


def _situations(domain, seed=0):
    state = build_state(domain, seed)
    cells = cover.covering_array(axis_values(domain), seed=seed, constraints=validated_constraints(domain))
    return [build_situation(domain, state, cell, seed=seed) for cell in cells.to_dict("records")], state


def mutation_table(domain, seed=0):
    """(kind, must_fail, oracle reward, judge score, situation id, reason) for every mutant of every passing
    reference replay."""
    situations, state = _situations(domain, seed)
    rows = []
    for situation, steps in passing_scripts(domain, situations, state, seed=seed):
        base = play(domain, situation, state, steps, seed=seed)
        assert base.verdict.reward == 1.0, (situation.situation_id, base.verdict)
        for mutant in mutants(domain, situation, state, steps, seed=seed):
            played = play(domain, mutant.situation, state, mutant.steps, seed=seed)
            judged, _ = outcome(case_card(mutant.situation, played.messages))
            rows.append((mutant.kind, mutant.must_fail, played.verdict.reward, judged, situation.situation_id,
                         played.verdict.reason))
    return rows


def _rates(rows):
    by_kind = defaultdict(list)
    for kind, must_fail, reward, *_ in rows:
        by_kind[kind].append(reward == 0.0 if must_fail else reward == 1.0)
    return {kind: sum(v) / len(v) for kind, v in by_kind.items()}


PACKS = ["retail", "it_helpdesk", "food_delivery", "hotel"]


@pytest.fixture(scope="module", params=PACKS + ["pharmacy"])
def table(request, pharmacy_pack):
    domain = pharmacy_pack if request.param == "pharmacy" else load_domain(request.param)
    return request.param, mutation_table(domain)


def test_every_mutant_a_careful_reader_fails_is_killed_and_every_benign_one_kept(table):
    name, rows = table
    rates = _rates(rows)
    counts = Counter(kind for kind, *_ in rows)
    # Every mutation kind has material in every pack (a kind with no mutant would be a test that cannot fail).
    assert set(KILLED) - {"confirm_other_tool", "drop_confirm", "flip_confirm", "write_after_seeing_ineligible"} <= \
        set(counts), (name, counts)
    survivors = [r for r in rows if r[1] and r[2] != 0.0]
    assert not survivors, (name, survivors[:5])
    lost = [r for r in rows if not r[1] and r[2] != 1.0]
    assert all(rates[k] >= 0.99 for k in KEPT if k in rates), (name, rates, lost[:5])


def test_the_good_judge_reads_the_same_verdicts(table):
    name, rows = table
    disagree = [r for r in rows if r[2] != r[3]]
    assert len(disagree) <= 0.01 * len(rows), (name, len(disagree), len(rows), disagree[:5])
