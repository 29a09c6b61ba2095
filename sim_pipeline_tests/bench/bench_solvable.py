"""How many of each shipped pack's planned situations are solvable, on each of the eight seeds the nightly runs.

The README's sentence on solvable situations is this module's output. Situations are planned as `make run` plans
them (the pairwise array with the stress quota's rows) and each is replayed with its reference solution. A figure
per pack: the share solvable over all seeds (1.0 means every situation of every seed), and the planned counts.
"""

from sim_pipeline import cover, defaults
from sim_pipeline.axes import axis_values, stress_rows, validated_constraints
from sim_pipeline.domain import load_domain, pack_names
from sim_pipeline.search.situations import build_situations
from sim_pipeline.world.state import build_state

SEEDS = range(8)


def _counts(name: str) -> tuple[list[int], int]:
    """Planned situations per seed, and how many over all seeds are not solvable."""
    domain = load_domain(name)
    values, constraints = axis_values(domain), validated_constraints(domain)
    planned, unsolvable = [], 0
    for seed in SEEDS:
        cells = cover.covering_array(values, seed=seed, constraints=constraints,
                                     must_include=stress_rows(domain, constraints))
        table = build_situations(domain, build_state(domain, seed), cells, seed=seed, n_phrasings=defaults.N_PHRASINGS)
        planned.append(len(table))
        unsolvable += int((~table["solvable"].astype(bool)).sum())
    return planned, unsolvable


def figures() -> list[dict]:
    """One solvable share per shipped pack, with the planned counts per seed."""
    rows = []
    for name in pack_names():
        planned, unsolvable = _counts(name)
        rows.append({"name": f"solvable_share_{name}", "value": 1 - unsolvable / sum(planned), "unit": "share",
                     "planned_per_seed": planned, "unsolvable": unsolvable})
    return rows
