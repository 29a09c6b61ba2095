"""The truth set (truth_set.py): trajectories in other agents' wording whose labels a person wrote, on the three
shipped packs and two packs written in the tests in other styles. The oracle matches every one; the good embedded
judge's agreement with them is reported (judge trust on the truth set)."""

from collections import Counter

import pytest

from sim_pipeline.domain import load_domain
from sim_pipeline.grade.judge import case_card
from sim_pipeline.models.sim_judge import outcome
from sim_pipeline.world.state import build_state
from sim_pipeline_tests.world.mutants import play
from sim_pipeline_tests.world.truth_set import TEMPLATES, truths

PACKS = ("retail", "it_helpdesk", "food_delivery", "hotel")


@pytest.fixture(scope="module")
def played(pharmacy_pack, gym_pack):
    domains = {name: load_domain(name) for name in PACKS} | {"pharmacy": pharmacy_pack, "gym": gym_pack}
    rows, states = [], {}
    for name, domain in domains.items():
        for truth in truths(name, domain):
            result = play(domain, truth.situation, states.setdefault(name, build_state(domain, 0)), truth.steps)
            judged, _ = outcome(case_card(truth.situation, result.messages))
            rows.append((truth, result.verdict, judged))
    return rows


def test_the_truth_set_is_large_and_covers_every_class(played):
    assert len(played) >= 200
    templates = Counter(t.template for t, _, _ in played)
    assert set(templates) == {name for kind in TEMPLATES.values() for name, *_ in kind}, templates
    per_pack = Counter(t.pack for t, _, _ in played)
    assert len(per_pack) == 6 and min(per_pack.values()) >= 25, per_pack


def test_the_oracle_matches_every_label(played):
    wrong = [(t.pack, t.template, t.situation.situation_id, t.label, v.reason) for t, v, _ in played
             if v.reward != t.label]
    assert not wrong, wrong[:10]


def test_the_good_judge_agrees_with_the_truth_set(played):
    agree = sum(judged == t.label for t, _, judged in played) / len(played)
    assert agree >= 0.97, agree
