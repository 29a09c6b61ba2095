"""Steps 04+05 together: held-out eval rollouts (k samples) and the search loop over train situations."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.domain import Domain
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline.search.arms import SearchContext
from sim_pipeline.search.loop import SearchSettings, run_search
from sim_pipeline.situation import Situation
from sim_pipeline.world.state import State


@dataclass(frozen=True)
class RolloutSettings:
    """How many rollouts: k for held-out tasks; n phrasings, k samples and the probe size for train situations."""

    heldout_samples: int = defaults.HELDOUT_SAMPLES
    n_phrasings: int = defaults.ROLLOUT_MODES[defaults.DEFAULT_ROLLOUT_MODE][0]
    train_samples: int = defaults.ROLLOUT_MODES[defaults.DEFAULT_ROLLOUT_MODE][1]
    probe_samples: int = defaults.ROLLOUT_MODES[defaults.DEFAULT_ROLLOUT_MODE][2]
    search: SearchSettings = SearchSettings()
    writer_model: str = defaults.SEARCH_WRITER_MODEL
    max_situations: int | None = None  # roll out only the first N situations of the plan (a small run)

    @classmethod
    def for_mode(cls, mode: str, *, search: SearchSettings = SearchSettings(),
                 heldout_samples: int = defaults.HELDOUT_SAMPLES, writer_model: str = defaults.SEARCH_WRITER_MODEL,
                 max_situations: int | None = None, **overrides: int | None) -> RolloutSettings:
        """A preset (explore, sft, rl, adaptive) with optional overrides of n_phrasings/train_samples/probe_samples."""
        if mode not in defaults.ROLLOUT_MODES:
            raise SimPipelineError(f"rollout mode '{mode}' is unknown. Fix: use one of {list(defaults.ROLLOUT_MODES)}")
        n, k, probe = defaults.ROLLOUT_MODES[mode]
        chosen = {"n_phrasings": n, "train_samples": k, "probe_samples": probe}
        chosen.update({key: value for key, value in overrides.items() if value is not None})
        if chosen["train_samples"] < 1 or chosen["n_phrasings"] < 1 or not 0 <= chosen["probe_samples"] <= \
                chosen["train_samples"] or heldout_samples < 1 or (max_situations is not None and max_situations < 1):
            raise SimPipelineError(f"rollout sizes {chosen} (heldout_samples={heldout_samples}) are inconsistent. "
                                   "Fix: n_phrasings, train_samples and heldout_samples >= 1, 0 <= probe <= train_samples")
        return cls(heldout_samples=heldout_samples, search=search, writer_model=writer_model,
                   max_situations=max_situations, **chosen)


def specs_for(situations: list[Situation], *, samples: range, n_phrasings: int, batch: int,
              arm: str | None = None) -> list[RolloutSpec]:
    """situations x phrasings x the given sample indices (arm: the given one, else the arm that drew each)."""
    return [RolloutSpec(s, p, k, arm or s.source, batch) for s in situations
            for p in range(min(n_phrasings, len(s.phrasings))) for k in samples]


async def run_probed(situations: list[Situation], policy: Policy, *, domain: Domain, state: State, gateway: Gateway,
                     settings: RolloutSettings, batch: int) -> pd.DataFrame:
    """k samples per situation and phrasing; with a probe, only groups whose probe samples split are filled to k.

    A group splits when its probe rollouts disagree on the program label (the state oracle), the one outcome known
    at rollout time; agreeing groups would be all-pass or all-fail, which carry no GRPO gradient.
    """
    probe = settings.probe_samples or settings.train_samples
    first = await run_rollouts(specs_for(situations, samples=range(probe), n_phrasings=settings.n_phrasings,
                                         batch=batch), policy, domain=domain, state=state, gateway=gateway)
    if probe >= settings.train_samples or not len(first):
        return first
    spread = first.groupby(["situation_id", "phrasing_index"])["oracle_reward"].nunique()
    split = {key for key, n in spread.items() if n > 1}
    by_id = {s.situation_id: s for s in situations}
    rest = [RolloutSpec(by_id[sid], p, k, by_id[sid].source, batch) for sid, p in sorted(split)
            for k in range(probe, settings.train_samples)]
    more = await run_rollouts(rest, policy, domain=domain, state=state, gateway=gateway)
    return pd.concat([first, more], ignore_index=True).sort_values("rollout_id", kind="stable").reset_index(drop=True)


async def simulate(situations: list[Situation], policy: Policy, *, domain: Domain, state: State, gateway: Gateway,
                   settings: RolloutSettings = RolloutSettings()) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """Run held-out rollouts and the search; returns (search table, all rollouts, stop reason)."""
    policy = dataclasses.replace(policy, writer_model=settings.writer_model)  # its rows record the writer's backend
    if settings.max_situations is not None:  # a prefix of the plan: every version of a small run sees the same one
        situations = situations[:settings.max_situations]
    heldout = [s for s in situations if s.split == "heldout"]
    seed = situations[0].seed if situations else 0
    train = [s for s in situations if s.split == "train"]
    eval_rows = run_rollouts(specs_for(heldout, samples=range(settings.heldout_samples), n_phrasings=1, batch=-1,
                                       arm="heldout"), policy, domain=domain, state=state, gateway=gateway)

    async def run_batch(chosen: list[Situation], batch: int) -> pd.DataFrame:
        return await run_probed(chosen, policy, domain=domain, state=state, gateway=gateway, settings=settings,
                                batch=batch)

    context = SearchContext(domain, state, seed, train, gateway, settings.writer_model, settings.n_phrasings)
    (search, train_rows, reason), eval_frame = await asyncio.gather(run_search(context, run_batch, settings.search),
                                                                    eval_rows)
    frames = [f for f in (eval_frame, train_rows) if len(f)]
    rollouts = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if len(rollouts):
        rollouts = rollouts.sort_values("rollout_id", kind="stable").reset_index(drop=True)
    return search, rollouts, reason
