"""Mutation testing of the state oracle (sim_pipeline_tests/world/mutants.py) on the shipped packs and the pharmacy
pack written in the tests, over three seeds: the share of mutants a careful reader fails that the oracle labels 0
(oracle_mutants_killed_<kind>, goal 1.00) and of benign mutants it keeps passing (oracle_benign_kept_<kind>, goal
>= 0.99), and how often the good embedded judge reads the same verdict from the transcript alone."""

import tempfile
from collections import defaultdict
from pathlib import Path

from sim_pipeline.domain import load_domain
from sim_pipeline_tests.world.conftest import write_pharmacy_pack
from sim_pipeline_tests.world.mutants import KEPT, KILLED
from sim_pipeline_tests.world.test_oracle_mutants import mutation_table

SEEDS = (0, 1, 2)
PACKS = ("retail", "it_helpdesk", "food_delivery")


def figures() -> list[dict]:
    """The kill and keep rates per mutation kind, pooled over packs and seeds, and the judge's agreement."""
    with tempfile.TemporaryDirectory() as root:
        domains = [load_domain(p) for p in PACKS] + [load_domain(write_pharmacy_pack(Path(root)))]
        rows = [row for domain in domains for seed in SEEDS for row in mutation_table(domain, seed)]
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
    return out
