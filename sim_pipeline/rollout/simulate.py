"""Steps 03+05 together: held-out eval rollouts (k samples) and the search loop over train situations."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.domain import Domain
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline.search.loop import ARM_STRUCTURED, SearchSettings, run_search
from sim_pipeline.situation import Situation
from sim_pipeline.world.state import State


@dataclass(frozen=True)
class RolloutSettings:
    """How many rollouts: k samples for held-out tasks and train situations, n phrasings, the search budget."""

    heldout_samples: int = defaults.HELDOUT_SAMPLES
    train_samples: int = defaults.TRAIN_SAMPLES
    n_phrasings: int = defaults.N_PHRASINGS
    search: SearchSettings = SearchSettings()


def specs_for(situations: list[Situation], *, samples: int, n_phrasings: int, arm: str, batch: int) -> list[RolloutSpec]:
    """situations x phrasings x samples."""
    return [RolloutSpec(s, p, k, arm, batch) for s in situations
            for p in range(min(n_phrasings, len(s.phrasings))) for k in range(samples)]


async def simulate(situations: list[Situation], policy: Policy, *, domain: Domain, state: State, gateway: Gateway,
                   settings: RolloutSettings = RolloutSettings()) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Run held-out rollouts and the search; returns (search table, all rollouts, stop reason)."""
    heldout = [s for s in situations if s.split == "heldout"]
    train = [s for s in situations if s.split == "train"]
    eval_rows = run_rollouts(specs_for(heldout, samples=settings.heldout_samples, n_phrasings=settings.n_phrasings,
                                       arm="heldout", batch=-1), policy, domain=domain, state=state, gateway=gateway)

    async def run_batch(chosen: list[Situation], batch: int) -> pd.DataFrame:
        specs = specs_for(chosen, samples=settings.train_samples, n_phrasings=settings.n_phrasings,
                          arm=ARM_STRUCTURED, batch=batch)
        return await run_rollouts(specs, policy, domain=domain, state=state, gateway=gateway)

    (search, train_rows, reason), eval_frame = await asyncio.gather(run_search(train, run_batch, settings.search),
                                                                    eval_rows)
    frames = [f for f in (eval_frame, train_rows) if len(f)]
    rollouts = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if len(rollouts):
        rollouts = rollouts.sort_values("rollout_id", kind="stable").reset_index(drop=True)
    return search, rollouts, reason
