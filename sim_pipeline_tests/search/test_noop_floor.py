"""The no-op floor of the shipped domains: the held-out pass@1 of an agent that never calls a tool.

A score is only worth something above what doing nothing earns. The state oracle passes a reply with no tool call
only where the policy alone decides (an off-topic request declined, an amount over a limit declined), so the floor is
the share of such tasks among the held-out ones, averaged over the eight seed partitions.
"""

import pytest

from sim_pipeline import cover, defaults
from sim_pipeline.axes import axis_values, validated_constraints
from sim_pipeline.domain import load_domain
from sim_pipeline.search.situations import build_situations
from sim_pipeline.world.state import build_state


def heldout_floor(name: str, seeds: range = range(len(defaults.SEEDS))) -> float:
    domain = load_domain(name)
    shares = []
    for seed in seeds:
        cells = cover.covering_array(axis_values(domain), seed=seed, constraints=validated_constraints(domain))
        table = build_situations(domain, build_state(domain, seed), cells, seed=seed, n_phrasings=1)
        heldout = table[table["split"] == "heldout"]
        shares.append(float(heldout["noop_pass"].mean()))
    return sum(shares) / len(shares)


def test_only_policy_decided_tasks_pass_without_tools():
    domain = load_domain("retail")
    cells = cover.covering_array(axis_values(domain), seed=0, constraints=validated_constraints(domain))
    table = build_situations(domain, build_state(domain, 0), cells, seed=0, n_phrasings=1)
    decided = (table["tool"] == "unrelated") | ((table["tool"] == "refund_order") & (table["rule"] == "refund_limit"))
    assert table.loc[~decided, "noop_pass"].sum() == 0
    assert table.loc[table["tool"] == "unrelated", "noop_pass"].all()


def test_it_helpdesk_floor_is_under_the_bar():
    assert heldout_floor("it_helpdesk") < defaults.MAX_NOOP_FLOOR


def test_food_delivery_floor_is_under_the_bar():
    assert heldout_floor("food_delivery") < defaults.MAX_NOOP_FLOOR


@pytest.mark.xfail(strict=True, reason=(
    "retail plans 100 cells and pairwise coverage of its 10 stances puts 10 of them on off-topic requests (1 in "
    "n_tools + 2 = 10), plus over-limit refunds: its held-out floor averages ~0.11. Making it pass needs a domain "
    "change (more tools, or stances the off-topic opening cannot play declared as constraints), not a looser bar."))
def test_retail_floor_is_under_the_bar():
    assert heldout_floor("retail") < defaults.MAX_NOOP_FLOOR
