"""A realistic graded set: the real retail pipeline pieces (covering array, world, situations, sim/agent-v1, sim/user,
sandbox, state oracle) on seed 0, and a scripted bad judge registered with litellm.

Rollouts and the `graded` tables go through `InProcessGateway`, which calls the embedded models directly: the same
replies as through litellm (it drops None-valued message keys as litellm does; test_grading pins both the transcripts
and the grades) at a tenth of the cost. The judge tests that are about the transport (statuses, caching, temperature)
use the real `Gateway` and litellm.
"""

import asyncio
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pytest

from sim_pipeline import cover
from sim_pipeline.axes import axis_values, validated_constraints
from sim_pipeline.domain import Domain, load_domain
from sim_pipeline.grade.grading import grade_rollouts
from sim_pipeline.models.model_config import ModelConfig
from sim_pipeline.seeding import digest
from sim_pipeline.models import sim_models
from sim_pipeline.models.gateway import Completion, Gateway, Sampling
from sim_pipeline.rollout.runner import Policy, RolloutSpec, run_rollouts
from sim_pipeline.search.situations import build_situations
from sim_pipeline.situation import Situation
from sim_pipeline.world.state import build_state

SAMPLES = 2  # k per situation: 2 x ~190 situations (two plans) gives ~380 gold rows
POLICY = Policy("agent-v1", "sim/agent-v1")


class InProcessGateway(Gateway):
    """Gateway.complete for the embedded models without litellm: rollouts only, never the judge under test (the
    rest, the rows' backend records included, is the real Gateway's)."""

    def config(self, model: str) -> ModelConfig:
        return ModelConfig.plain(model)

    async def complete(self, model: str, messages: list[dict[str, Any]], *, tools: list[dict[str, Any]] | None = None,
                       sampling: Sampling | None = None, sample_index: int = 0, logprobs: bool = True,
                       tool_choice: dict[str, Any] | None = None) -> Completion:
        sampling = sampling or Sampling()
        shown = [{k: v for k, v in m.items() if v is not None} for m in messages]  # as litellm passes them on
        out = sim_models.respond(model, shown, tools=tools, temperature=sampling.temperature, seed=sampling.seed)
        return Completion(out.message, out.logprob, out.n_tokens, None, 0, 0.0, 0.0, False, "decision")


@dataclass(frozen=True)
class RetailRun:
    """Rollouts of sim/agent-v1 on retail seed 0 and what grading them needs."""

    domain: Domain
    situations: dict[str, Situation]
    rollouts: pd.DataFrame
    specs: list[RolloutSpec]
    state: Any


@pytest.fixture(scope="session")
def retail_run() -> RetailRun:
    domain = load_domain("retail")
    # Two plans' cells in seed 0's world: enough situations that need a write (every probe kind >= 20) now that the
    # eligibility rules turn some of one plan's into declines.
    cells = pd.concat([cover.covering_array(axis_values(domain), seed=plan, constraints=validated_constraints(domain))
                       for plan in (0, 1)], ignore_index=True).drop_duplicates()
    state = build_state(domain, 0)
    table = build_situations(domain, state, cells, seed=0, n_phrasings=1).drop_duplicates("situation_id")
    situations = [Situation.from_row(r) for r in table.to_dict("records")]
    specs = [RolloutSpec(s, 0, k) for s in situations for k in range(SAMPLES)]
    rollouts = asyncio.run(run_rollouts(specs, POLICY, domain=domain, state=state, gateway=InProcessGateway()))
    return RetailRun(domain, {s.situation_id: s for s in situations}, rollouts, specs, state)


@pytest.fixture(scope="session")
def graded(retail_run):
    """grades(judge_model) -> the grades table of the retail run under that judge (computed once per judge)."""
    cache: dict[str, pd.DataFrame] = {}
    gateway = InProcessGateway()

    def grades(judge_model: str) -> pd.DataFrame:
        if judge_model not in cache:
            cache[judge_model] = asyncio.run(grade_rollouts(
                retail_run.rollouts, retail_run.situations, domain=retail_run.domain, judge_model=judge_model,
                gateway=gateway))
        return cache[judge_model]

    return grades


SCRIPTED_CALLS: list[tuple[str, dict[str, Any]]] = []


@pytest.fixture(scope="session")
def scripted_judges() -> list[tuple[str, dict[str, Any]]]:
    """litellm provider `scripted`: scripted/garbage answers prose, scripted/timeout and scripted/broken raise;
    scripted/sometimes-timeout and scripted/sometimes-broken raise for one case in five and answer prose otherwise.

    Returns the list of (model, optional_params) every scripted call received.
    """
    import litellm
    from litellm.llms.custom_llm import CustomLLMError
    from litellm.types.utils import Choices, Message, ModelResponse

    from sim_pipeline.models.sim_provider import register

    class Scripted(litellm.CustomLLM):
        def completion(self, model: str, messages: list, *args: Any, optional_params: dict | None = None,
                       **kwargs: Any) -> ModelResponse:
            SCRIPTED_CALLS.append((model, dict(optional_params or {})))
            # "sometimes-": fails for one case in five (by the request's content, so every try of it fails too).
            if model.startswith("sometimes-") and int(digest(messages), 16) % 5:
                model = "garbage"
            if model.endswith("timeout"):
                raise litellm.Timeout(message="the judge took too long", model=model, llm_provider="scripted")
            if model.endswith("broken"):
                raise CustomLLMError(status_code=500, message="the judge crashed")
            reply = Message(content="Looks fine to me, I would pass it.", role="assistant")
            return ModelResponse(model=f"scripted/{model}", choices=[Choices(index=0, message=reply,
                                                                             finish_reason="stop")])

        async def acompletion(self, *args: Any, **kwargs: Any) -> ModelResponse:
            return self.completion(*args, **kwargs)

    register()  # the sim provider first: it keeps other providers when it registers
    litellm.custom_provider_map = [m for m in litellm.custom_provider_map if m.get("provider") != "scripted"] + [
        {"provider": "scripted", "custom_handler": Scripted()}]
    return SCRIPTED_CALLS
