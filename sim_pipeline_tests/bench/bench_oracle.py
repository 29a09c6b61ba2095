"""Mutation testing of the state oracle (sim_pipeline_tests/world/mutants.py) on the shipped packs and the pharmacy
pack written in the tests, over three seeds: the share of mutants a careful reader fails that the oracle labels 0
(oracle_mutants_killed_<kind>, goal 1.00) and of benign mutants it keeps passing (oracle_benign_kept_<kind>, goal
>= 0.99), and how often the good embedded judge reads the same verdict from the transcript alone. Then the truth set
(truth_set.py, labels a person wrote) on those packs and the gym pack: the oracle's and the judge's agreement."""

import tempfile
from collections import defaultdict
from pathlib import Path

from sim_pipeline.domain import load_domain
from sim_pipeline.grade.judge import case_card
from sim_pipeline.models.sim_judge import outcome
from sim_pipeline.world.state import build_state
from sim_pipeline_tests.world.conftest import write_gym_pack, write_pharmacy_pack
from sim_pipeline_tests.world.mutants import KEPT, KILLED, play
from sim_pipeline_tests.world.test_oracle_mutants import mutation_table
from sim_pipeline_tests.world.truth_set import truths

SEEDS = (0, 1, 2)
PACKS = ("retail", "it_helpdesk", "food_delivery", "hotel")


def figures() -> list[dict]:
    """The kill and keep rates per mutation kind, pooled over packs and seeds, and the judge's agreement."""
    with tempfile.TemporaryDirectory() as root:
        domains = [load_domain(p) for p in PACKS] + [load_domain(write_pharmacy_pack(Path(root)))]
        rows = [row for domain in domains for seed in SEEDS for row in mutation_table(domain, seed)]
        truth_figures = _truth_set([*domains, load_domain(write_gym_pack(Path(root)))])
    outcomes = defaultdict(list)
    for kind, must_fail, reward, *_ in rows:
        outcomes[kind].append(reward == (0.0 if must_fail else 1.0))
    out = []
    for kind in (*KILLED, *KEPT):
        prefix = "oracle_mutants_killed" if kind in KILLED else "oracle_benign_kept"
        hits = outcomes.get(kind, [])
        out.append({"name": f"{prefix}_{kind}", "value": sum(hits) / len(hits) if hits else float("nan"),
                    "unit": f"share of {len(hits)} mutants"})
    agree = sum(r[2] == r[3] for r in rows) / len(rows)
    out.append({"name": "oracle_mutants_judge_agreement", "value": agree, "unit": f"share of {len(rows)} mutants"})
    return out + truth_figures


def _truth_set(domains: list) -> list[dict]:
    """The truth set (labels a person wrote): the oracle's and the good embedded judge's agreement with it."""
    oracle = judge = total = 0
    for domain in domains:
        state = build_state(domain, 0)
        for truth in truths(domain.name, domain):
            played = play(domain, truth.situation, state, truth.steps)
            judged, _ = outcome(case_card(truth.situation, played.messages))
            total += 1
            oracle += played.verdict.reward == truth.label
            judge += judged == truth.label
    unit = f"share of {total} scripted trajectories"
    return [{"name": "truth_set_oracle_agreement", "value": oracle / total, "unit": unit},
            {"name": "truth_set_judge_agreement", "value": judge / total, "unit": unit}]
