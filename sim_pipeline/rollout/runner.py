"""Step 05: run the agent on situations x phrasings x samples in the sandbox world, one row per rollout."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.domain import Domain
from sim_pipeline.errors import ModelCallError
from sim_pipeline.models.gateway import Completion, Gateway, ProviderError, Sampling
from sim_pipeline.models.mcp_harness import is_mcp_agent
from sim_pipeline.models.provenance import AGENT, USER, WRITER, backend_record
from sim_pipeline.models.reply_reader import assistant_texts, read_replies
from sim_pipeline.protocol.replies import read_by
from sim_pipeline.protocol.statuses import OK, TURN_CAP, USER_LEFT, is_error
from sim_pipeline.protocol.user_events import (
    FINISH_ERROR,
    FINISH_TURN_CAP,
    FINISH_USER_LEFT,
    FINISH_USER_SATISFIED,
    LEAVE,
    SATISFIED,
    USER_ACTION_CHOICE,
    USER_ACTION_TOOL,
)
from sim_pipeline.rollout.episode import Episode, UserProtocolError
from sim_pipeline.rollout.signature import behavior_signature, describe
from sim_pipeline.search.arms import writer_sampling
from sim_pipeline.seeding import short_id, stable_int
from sim_pipeline.situation import AXES, Situation
from sim_pipeline.world.oracle import Verdict
from sim_pipeline.world.state import State


@dataclass(frozen=True)
class Policy:
    """The agent under test: a registry version, its model string and sampling settings."""

    version: str
    model: str
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    user_model: str = defaults.DEFAULT_USER_MODEL
    system_prompt: str = ""  # appended to the domain's prompt
    reply_classifier: str = ""  # a model that reads the agent's replies for the oracle ('': the rules)
    writer_model: str = defaults.SEARCH_WRITER_MODEL  # the model that writes the search's openings (its record)


@dataclass(frozen=True)
class RolloutSpec:
    """One rollout to run: a situation, which opening, which sample, and where it came from."""

    situation: Situation
    phrasing_index: int
    sample_index: int
    arm: str = "heldout"
    batch: int = -1


def sample_seed(situation_id: str, phrasing_index: int, sample_index: int) -> int:
    """The sampling seed of a rollout: the same under every policy version (common random numbers pair better)."""
    return stable_int("sample", situation_id, phrasing_index, sample_index) % (2**31 - 1)


def rollout_id(policy_version: str, spec: RolloutSpec) -> str:
    """A rollout id unique across versions, seeds, situations, phrasings and samples."""
    return short_id("rollout", policy_version, spec.situation.situation_id, spec.phrasing_index, spec.sample_index,
                    length=16)


async def run_rollout(spec: RolloutSpec, policy: Policy, *, domain: Domain, state: State, gateway: Gateway,
                      max_turns: int = defaults.MAX_TURNS) -> dict[str, Any]:
    """Play one conversation to its end and return its row (errors become the row's status, never raise)."""
    if is_mcp_agent(gateway.config(policy.model).model):  # the harness drives the conversation: rollout/mcp_agent.py
        from sim_pipeline.rollout.mcp_agent import run_harness_rollout

        return await run_harness_rollout(spec, policy, domain=domain, state=state, gateway=gateway, max_turns=max_turns)
    situation = spec.situation
    seed = sample_seed(situation.situation_id, spec.phrasing_index, spec.sample_index)
    agent_sampling = Sampling(policy.temperature, policy.top_p, policy.max_tokens, seed)
    user_sampling = Sampling(1.0, 1.0, policy.max_tokens, seed)
    episode = Episode(situation, domain=domain, state=state, phrasing_index=spec.phrasing_index,
                      system_prompt=policy.system_prompt)
    prompt_tokens, cost, calls, repaired = 0, 0.0, 0, 0
    dropped: set[str] = set()
    turns: list[Completion] = []  # the agent's replies: their logprobs, tokens and token counts
    status, finish, error = TURN_CAP, FINISH_TURN_CAP, None
    started = time.perf_counter()

    def account(c: Completion) -> None:
        nonlocal prompt_tokens, cost, calls, repaired
        prompt_tokens += c.prompt_tokens
        cost += c.cost
        calls += 1
        repaired += bool(c.repaired)

    try:
        for _ in range(max_turns):
            reply = await gateway.complete(policy.model, episode.messages, tools=domain.tool_schemas,
                                           sampling=agent_sampling)
            account(reply)
            turns.append(reply)
            dropped.update(reply.dropped_params)
            if reply.message.get("tool_calls"):
                episode.act(reply.message)
                continue
            ending = episode.reply(reply.message)
            if ending:
                status, finish = ending
                break
            said, decision = await episode.user_turn(gateway, policy.user_model, user_sampling)
            account(said)
            if decision == LEAVE:
                status, finish = USER_LEFT, FINISH_USER_LEFT
                break
            if decision == SATISFIED:
                status, finish = OK, FINISH_USER_SATISFIED
                break
    except ProviderError as exc:
        # Not the agent's conduct: the row keeps its status and error text and is never graded.
        status, finish, error = exc.status, FINISH_ERROR, str(exc)
        if isinstance(exc, UserProtocolError):
            account(exc.completion)  # the user model answered, outside the protocol: its tokens were still spent
    except ModelCallError:
        raise  # auth and quota errors stop the run: every later call would fail the same way
    return await finished_row(spec, policy, episode=episode, gateway=gateway, status=status, finish=finish,
                              error=error, turns=turns, agent_sampling=agent_sampling, user_sampling=user_sampling,
                              usage=(prompt_tokens, cost, calls, repaired), dropped=dropped, started=started)


async def finished_row(spec: RolloutSpec, policy: Policy, *, episode: Episode, gateway: Gateway, status: str,
                       finish: str, error: str | None, turns: list[Completion], agent_sampling: Sampling,
                       user_sampling: Sampling, usage: tuple[int, float, int, int], dropped: set[str],
                       started: float) -> dict[str, Any]:
    """The row of a played conversation, graded by the oracle unless it ended on an error outside the agent's conduct.

    Every backend records its rows through this one function (a chat model, your code, an MCP harness), so a row
    means the same whatever played it. `usage` is (prompt tokens, cost, model calls, replies with repaired markup).
    """
    situation, domain = spec.situation, episode.domain
    prompt_tokens, cost, calls, repaired = usage
    verdict = None if is_error(status) else await _verdict(episode, gateway, policy.reply_classifier)
    messages, final_text = episode.messages, episode.final_text()
    steps = [(e.tool, e.status) for e in episode.sandbox.events]
    return {
        "rollout_id": rollout_id(policy.version, spec), "situation_id": situation.situation_id,
        "seed": situation.seed, "policy_version": policy.version, "split": situation.split, "arm": spec.arm,
        "batch": spec.batch, "phrasing_index": spec.phrasing_index, "sample_index": spec.sample_index,
        **{a: situation.cell[a] for a in AXES},
        "messages": messages, "opening_message": episode.opening, "final_text": final_text, "finish_reason": finish,
        "status": status, "error": error, **logprob_columns(turns), "model": policy.model,
        "sampling": agent_sampling.as_dict() | {"user_model": policy.user_model,
                                                "reply_classifier": policy.reply_classifier,
                                                "endpoint": gateway.config(policy.model).host(),
                                                "dropped_params": sorted(dropped)},
        "backends": [
            backend_record(gateway, AGENT, policy.model, agent_sampling, tools=domain.tool_schemas),
            backend_record(gateway, USER, policy.user_model, user_sampling if episode.user_events else None,
                           tools=[USER_ACTION_TOOL], tool_choice=USER_ACTION_CHOICE),
            # The writer wrote the first opening of the llm_guided arm's situations: only those rows were sent its words.
            backend_record(gateway, WRITER, policy.writer_model, writer_sampling(situation.situation_id)
                           if situation.source == "llm_guided" and spec.phrasing_index == 0 else None),
        ],
        "behavior_signature": behavior_signature(steps, final_text), "behavior": describe(steps, final_text),
        "tool_events": episode.tool_events(),
        "user_events": episode.user_events,
        "n_turns": sum(1 for m in messages if m["role"] == "assistant"),
        "oracle_reward": verdict.reward if verdict else None,
        "oracle_reason": verdict.reason if verdict else f"not graded: {status}",
        "oracle_check": verdict.check if verdict else "",
        "prompt_tokens": prompt_tokens, "cost": cost, "model_calls": calls, "markup_repaired": repaired,
        "latency_s": time.perf_counter() - started,
    }



async def _verdict(episode: Episode, gateway: Gateway, reader: str) -> Verdict:
    """The oracle's label, with the agent's replies read by `reader` when the registry names one."""
    if not reader:
        return episode.verdict()
    reading = await read_replies(gateway, reader, assistant_texts(episode.messages))
    with read_by(reading.labels):
        return episode.verdict()


def logprob_columns(turns: list[Completion]) -> dict[str, Any]:
    """A row's log-probability columns from the agent's replies, honest about what the backend returned.

    `logprob` sums the log-probabilities there are and is None when there are none (never a silent 0.0);
    `logprob_coverage` is the share of completion tokens with a logprob (`tokens` source: a backend may leave
    them out on tool-call turns), or of agent turns with one (`decision`: the embedded models score each decision
    exactly, not each token; `callable`: your agent's own numbers); `tokens` holds the token strings where the
    backend gives them; `turn_token_counts` the completion tokens of each agent turn.
    """
    scored = [t for t in turns if t.logprob is not None]
    sources = {t.logprob_source or "tokens" for t in scored}
    source = next((s for s in ("decision", "callable", "tokens") if s in sources), None)
    token_lps = [lp for t in turns for lp in t.token_logprobs or []]
    counts = [int(t.n_tokens) for t in turns]
    if source == "tokens":
        coverage = min(1.0, len(token_lps) / sum(counts)) if sum(counts) else 0.0
    else:
        coverage = len(scored) / len(turns) if turns else 0.0
    return {
        "logprob": float(sum(t.logprob for t in scored)) if scored else None,
        "n_tokens": sum(counts), "token_logprobs": token_lps, "tokens": [tok for t in turns for tok in t.tokens or []],
        "turn_token_counts": counts, "logprob_coverage": coverage, "logprob_source": source,
    }


async def run_rollouts(specs: list[RolloutSpec], policy: Policy, *, domain: Domain, state: State,
                       gateway: Gateway) -> pd.DataFrame:
    """Run many rollouts concurrently; rows come back ordered by rollout id whatever the completion order."""
    rows = await asyncio.gather(*(run_rollout(s, policy, domain=domain, state=state, gateway=gateway) for s in specs))
    frame = pd.DataFrame(rows)
    return frame.sort_values("rollout_id", kind="stable").reset_index(drop=True) if len(frame) else frame
