"""A small, deterministic rollout job: the resume test runs it in a subprocess and kills it midway."""

import asyncio
import sys
from functools import lru_cache

import pandas as pd

from sim_pipeline.axes import axis_values
from sim_pipeline.cover import covering_array
from sim_pipeline.domain import Domain, load_domain
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.runner import Policy
from sim_pipeline.rollout.simulate import RolloutSettings, simulate
from sim_pipeline.search.loop import SearchSettings
from sim_pipeline.search.situations import build_situations
from sim_pipeline.situation import Situation
from sim_pipeline.world.state import State, build_state

SETTINGS = RolloutSettings.for_mode("adaptive", heldout_samples=2, search=SearchSettings(8, 48))


@lru_cache(maxsize=1)
def world():
    return seed_world(load_domain("retail"))


def seed_world(domain: Domain) -> tuple[Domain, State, list[Situation]]:
    """A domain's seed-0 world state and planned situations (held-out and train), one phrasing each."""
    state = build_state(domain, 0)
    cells = covering_array(axis_values(domain), seed=0, constraints=domain.constraints)
    table = build_situations(domain, state, cells, seed=0, n_phrasings=1)
    return domain, state, [Situation.from_row(r) for r in table.to_dict("records")]


def run(gateway: Gateway, version: str = "agent-v1") -> pd.DataFrame:
    """Held-out rollouts and the search for seed 0."""
    domain, state, situations = world()
    _, rows, _ = asyncio.run(simulate(situations, Policy(version, f"sim/{version}"), domain=domain, state=state,
                                      gateway=gateway, settings=SETTINGS))
    return rows


if __name__ == "__main__":
    run(Gateway(cache_path=sys.argv[1], concurrency=int(sys.argv[2]) if len(sys.argv) > 2 else 16))
