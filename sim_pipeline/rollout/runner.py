"""Step 05: run the agent on situations x phrasings x samples in the sandbox world, one row per rollout."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import pandas as pd

from sim_pipeline import defaults
from sim_pipeline.domain import Domain
from sim_pipeline.errors import ModelCallError
from sim_pipeline.models.gateway import Completion, Gateway, ProviderError, Sampling
from sim_pipeline.protocol.statuses import AGENT_ERROR, OK, TURN_CAP, USER_ERROR, USER_LEFT, is_error
from sim_pipeline.protocol.transcript import tool_turns
from sim_pipeline.protocol.user_events import (
    DECISIONS,
    FINISH_EMPTY_REPLY,
    FINISH_ERROR,
    FINISH_GOAL_REACHED,
    FINISH_TRANSFERRED,
    FINISH_TURN_CAP,
    FINISH_USER_LEFT,
    FINISH_USER_SATISFIED,
    LEAVE,
    SATISFIED,
    USER_ACTION,
    USER_ACTION_CHOICE,
    USER_ACTION_TOOL,
    user_event,
)
from sim_pipeline.rollout.prompts import agent_system_prompt, user_system_prompt
from sim_pipeline.rollout.signature import behavior_signature, describe
from sim_pipeline.seeding import short_id, stable_int
from sim_pipeline.situation import AXES, Situation
from sim_pipeline.world.oracle import goal_reached, label
from sim_pipeline.world.sandbox import Sandbox
from sim_pipeline.world.state import State


@dataclass(frozen=True)
class Policy:
    """The agent under test: a registry version, its model string and sampling settings."""

    version: str
    model: str
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    user_model: str = "sim/user"
    system_prompt: str = ""  # appended to the domain's prompt


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


def _text(role: str, content: str) -> dict[str, Any]:
    return {"role": role, "content": content, "tool_calls": None, "tool_call_id": None, "name": None}


def _full(message: dict[str, Any]) -> dict[str, Any]:
    return {"role": message["role"], "content": message.get("content"), "tool_calls": message.get("tool_calls"),
            "tool_call_id": message.get("tool_call_id"), "name": message.get("name")}


def user_action(message: dict[str, Any], model: str) -> tuple[str, str]:
    """(what the user said, the decision) from a user model's `user_action` call; anything else is a user error."""
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        if function.get("name") != USER_ACTION:
            continue
        try:
            args = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError):
            args = None
        if isinstance(args, dict) and args.get("decision") in DECISIONS and isinstance(args.get("message"), str):
            return args["message"].strip(), args["decision"]
        raise ProviderError(f"user model {model}: user_action arguments {str(function.get('arguments'))[:120]!r} "
                            f"are not {{message, decision in {list(DECISIONS)}}}", status=USER_ERROR)
    raise ProviderError(f"user model {model} did not answer through the user_action tool (it said "
                        f"{str(message.get('content'))[:120]!r}); use a model that supports tool calls",
                        status=USER_ERROR)


async def run_rollout(spec: RolloutSpec, policy: Policy, *, domain: Domain, state: State, gateway: Gateway,
                      max_turns: int = defaults.MAX_TURNS) -> dict[str, Any]:
    """Play one conversation to its end and return its row (errors become the row's status, never raise)."""
    situation = spec.situation
    seed = sample_seed(situation.situation_id, spec.phrasing_index, spec.sample_index)
    agent_sampling = Sampling(policy.temperature, policy.top_p, policy.max_tokens, seed)
    user_sampling = Sampling(1.0, 1.0, policy.max_tokens, seed)
    sandbox = Sandbox(domain, seed=situation.seed, setup=situation.setup, state=state)
    opening = situation.phrasings[spec.phrasing_index]
    messages = [_text("system", agent_system_prompt(domain, policy.system_prompt)), _text("user", opening)]
    user_view = [_text("system", user_system_prompt(situation, domain)), _text("assistant", opening)]
    logprob, n_tokens, token_lps, prompt_tokens, cost, calls = 0.0, 0, [], 0, 0.0, 0
    status, finish, error, logprob_source = TURN_CAP, FINISH_TURN_CAP, None, None
    user_events: list[dict[str, Any]] = []
    started = time.perf_counter()

    def account(c: Completion) -> None:
        nonlocal prompt_tokens, cost, calls
        prompt_tokens += c.prompt_tokens
        cost += c.cost
        calls += 1

    try:
        for _ in range(max_turns):
            reply = await gateway.complete(policy.model, messages, tools=domain.tool_schemas, sampling=agent_sampling)
            account(reply)
            logprob += reply.logprob or 0.0
            n_tokens += reply.n_tokens
            token_lps.extend(reply.token_logprobs or [])
            logprob_source = reply.logprob_source
            message = _full(reply.message)
            messages.append(message)
            if message["tool_calls"]:
                for call in message["tool_calls"]:
                    result = sandbox.call(call["function"]["name"], call["function"]["arguments"])
                    messages.append({"role": "tool", "content": json.dumps(result, sort_keys=True), "tool_calls": None,
                                     "tool_call_id": call["id"], "name": call["function"]["name"]})
                continue
            if not (message["content"] or "").strip():
                status, finish = AGENT_ERROR, FINISH_EMPTY_REPLY
                break
            if goal_reached(domain, situation, sandbox.events, sandbox.state):
                status, finish = OK, FINISH_GOAL_REACHED  # the world shows the goal met and the agent has replied
                break
            if any(e.status == "ok" and (t := domain.tool(e.tool)) is not None and t.kind == "transfer"
                   for e in sandbox.events):
                status, finish = OK, FINISH_TRANSFERRED  # a human has the conversation now; the agent has said so
                break
            user_view.append(_text("user", message["content"]))
            try:
                said = await gateway.complete(policy.user_model, user_view, tools=[USER_ACTION_TOOL],
                                              tool_choice=USER_ACTION_CHOICE, sampling=user_sampling)
            except ProviderError as exc:
                raise ProviderError(f"user model {policy.user_model}: {exc}", status=USER_ERROR) from exc
            account(said)
            text, decision = user_action(said.message, policy.user_model)
            user_events.append(user_event(len(messages), decision))
            messages.append(_text("user", text))
            user_view.append(_text("assistant", text))
            if decision == LEAVE:
                status, finish = USER_LEFT, FINISH_USER_LEFT
                break
            if decision == SATISFIED:
                status, finish = OK, FINISH_USER_SATISFIED
                break
    except ProviderError as exc:
        # Not the agent's conduct: the row keeps its status and error text and is never graded.
        status, finish, error = exc.status, FINISH_ERROR, str(exc)
    except ModelCallError:
        raise  # auth and quota errors stop the run: every later call would fail the same way
    verdict = None if is_error(status) else label(domain, situation, sandbox.events, sandbox.snapshot(), messages,
                                                  user_events)
    turns = tool_turns(messages)
    steps = [(e.tool, e.status) for e in sandbox.events]
    final_text = next((m["content"] for m in reversed(messages) if m["role"] == "assistant" and m["content"]), "")
    return {
        "rollout_id": rollout_id(policy.version, spec), "situation_id": situation.situation_id,
        "seed": situation.seed, "policy_version": policy.version, "split": situation.split, "arm": spec.arm,
        "batch": spec.batch, "phrasing_index": spec.phrasing_index, "sample_index": spec.sample_index,
        **{a: situation.cell[a] for a in AXES},
        "messages": messages, "opening_message": opening, "final_text": final_text, "finish_reason": finish,
        "status": status, "error": error, "logprob": logprob, "n_tokens": n_tokens, "token_logprobs": token_lps,
        "logprob_source": logprob_source, "model": policy.model,
        "sampling": agent_sampling.as_dict() | {"user_model": policy.user_model},
        "behavior_signature": behavior_signature(steps, final_text), "behavior": describe(steps, final_text),
        "tool_events": [{"index": e.index, "tool": e.tool, "arguments": json.dumps(e.arguments, sort_keys=True),
                         "status": e.status, "entity_id": e.entity_id, "applied": e.applied,
                         "turn": turns[e.index] if e.index < len(turns) else None,
                         "error": e.result.get("error") if e.status == "rejected" else None,
                         "field": _rejected_field(e.result) if e.status == "rejected" else None}
                        for e in sandbox.events],
        "user_events": user_events,
        "n_turns": sum(1 for m in messages if m["role"] == "assistant"),
        "oracle_reward": verdict.reward if verdict else None,
        "oracle_reason": verdict.reason if verdict else f"not graded: {status}",
        "prompt_tokens": prompt_tokens, "cost": cost, "model_calls": calls,
        "latency_s": time.perf_counter() - started,
    }


def _rejected_field(result: dict[str, Any]) -> str | None:
    """The argument a rejection names (its `field`, else the first of its `fields`)."""
    field = result.get("field") or (result.get("fields") or [None])[0]
    return str(field) if field else None


async def run_rollouts(specs: list[RolloutSpec], policy: Policy, *, domain: Domain, state: State,
                       gateway: Gateway) -> pd.DataFrame:
    """Run many rollouts concurrently; rows come back ordered by rollout id whatever the completion order."""
    rows = await asyncio.gather(*(run_rollout(s, policy, domain=domain, state=state, gateway=gateway) for s in specs))
    frame = pd.DataFrame(rows)
    return frame.sort_values("rollout_id", kind="stable").reset_index(drop=True) if len(frame) else frame
