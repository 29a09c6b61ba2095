"""Novelty: distinct behaviour signatures per 1000 train rollouts, five-arm search vs the structured arm alone."""

import asyncio

from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.runner import Policy
from sim_pipeline.rollout.simulate import RolloutSettings, run_probed
from sim_pipeline.search.arms import SearchContext
from sim_pipeline.search.loop import SearchSettings, run_search, unique_signatures_per_1000
from sim_pipeline.search.weights import WeightRule
from sim_pipeline_tests.rollout.small_run import world

BUDGET_ROWS = 800
ARMS = ("structured", "llm_guided", "open_ended", "behavior_targeted", "failure_mutation")
STRUCTURED_ONLY = WeightRule(start={a: float(a == "structured") for a in ARMS},
                             floors={a: float(a == "structured") for a in ARMS},
                             caps={a: float(a == "structured") for a in ARMS})


def _novelty(rule: WeightRule, version: str) -> tuple[float, int]:
    domain, state, situations = world()
    train = [s for s in situations if s.split == "train"]
    gateway = Gateway(fast_path=True)
    settings = RolloutSettings.for_mode("adaptive")
    policy = Policy(version, f"sim/{version}")

    async def run_batch(chosen, batch):
        return await run_probed(chosen, policy, domain=domain, state=state, gateway=gateway, settings=settings,
                                batch=batch)

    ctx = SearchContext(domain, state, 0, train, gateway)
    _, rows, _ = asyncio.run(run_search(ctx, run_batch, SearchSettings(budget_rows=BUDGET_ROWS, patience=99,
                                                                       cell_target=99), rule))
    return unique_signatures_per_1000(rows), len(rows)


def figures() -> list[dict]:
    """Search vs structured-only novelty for both embedded agents (retail, seed 0)."""
    out = []
    for version in ("agent-v1", "agent-v2"):
        search, n = _novelty(WeightRule(), version)
        structured, m = _novelty(STRUCTURED_ONLY, version)
        out.append({"name": f"unique_signatures_per_1000_search_{version} ({n} rollouts)", "value": search,
                    "unit": "signatures/1000 rollouts", "baseline_name": f"structured arm alone ({m} rollouts)",
                    "baseline_value": structured, "ratio": search / structured})
    return out
