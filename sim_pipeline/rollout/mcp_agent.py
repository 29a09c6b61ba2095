"""An MCP agent harness as the policy under test (`model: mcp-agent:<command>`): one process per rollout.

For each rollout the runner serves the situation's world over streamable HTTP on 127.0.0.1 (rollout/mcp_world.py:
the domain's tools and `message_user`, answered by the registry's user model) and starts the command with the
endpoint in `SIM_WORLD_MCP_URL` (and in place of a `{url}` argument), the sampling seed in `SIM_WORLD_SEED`. The
harness connects as an MCP client, reads the system prompt (the server's instructions) and the customer's opening
(the `opening` prompt), and plays the conversation with its own prompts, memory and loop. What it did is recorded
as the same row a chat model's rollout gives, then graded, cut and measured by the same steps.

How the rollout ends:
- the conversation ends inside the world (the goal met and the customer told, a hand-off, the user leaves or is
  satisfied, the turn cap): that ending, whatever the harness does next (it is stopped after a grace period);
- the harness exits 0 without that: `agent_error` / `agent_exited`, graded (stopping mid-conversation is conduct);
- it exits non-zero, cannot start, or runs past its timeout: `provider_error`, with its stderr's tail; never graded,
  as a failing model call is not (a harness's own model failing looks like this);
- the user model fails: `user_error`, never graded.
A harness returns no log-probabilities: the row's `logprob` is null, its source null, its coverage 0 and no token
counts are claimed (the harness's model calls are its own).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from sim_pipeline import defaults
from sim_pipeline.domain import Domain
from sim_pipeline.models.gateway import Gateway, Sampling
from sim_pipeline.models.mcp_harness import SEED_VARIABLE, URL_VARIABLE, harness_command
from sim_pipeline.protocol.statuses import AGENT_ERROR, PROVIDER_ERROR
from sim_pipeline.protocol.user_events import FINISH_AGENT_EXITED, FINISH_ERROR
from sim_pipeline.rollout.episode import Episode
from sim_pipeline.rollout.mcp_world import WorldSession, serve_http
from sim_pipeline.rollout.runner import Policy, RolloutSpec, finished_row, sample_seed
from sim_pipeline.world.state import State

URL_ARGUMENT = "{url}"  # a command argument replaced by the world's endpoint (for harnesses that take a flag)
_slots: dict[int, asyncio.Semaphore] = {}  # per event loop: asyncio primitives belong to one loop


def _slot() -> asyncio.Semaphore:
    key = id(asyncio.get_running_loop())
    if key not in _slots:
        _slots[key] = asyncio.Semaphore(defaults.MCP_AGENT_CONCURRENCY)
    return _slots[key]


async def _tail(stream: asyncio.StreamReader | None, limit: int) -> str:
    """A stream read to its end, keeping only its last `limit` characters (a chatty harness cannot fill memory)."""
    kept = b""
    while stream is not None and (chunk := await stream.read(65536)):
        kept = (kept + chunk)[-limit * 4:]  # bytes: up to four per character
    return kept.decode("utf-8", "replace")[-limit:]


async def play(session: WorldSession, command: list[str], seed: int, *, timeout_s: float,
               grace_s: float = defaults.MCP_AGENT_EXIT_GRACE_S) -> tuple[str, str, str | None]:
    """Serve the session, run the harness against it, and return (status, finish reason, error text)."""
    async with serve_http(session) as url:
        argv = [url if arg == URL_ARGUMENT else arg for arg in command]
        env = {**os.environ, URL_VARIABLE: url, SEED_VARIABLE: str(seed)}
        try:
            process = await asyncio.create_subprocess_exec(*argv, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                           stdout=asyncio.subprocess.DEVNULL,
                                                           stderr=asyncio.subprocess.PIPE)
        except OSError as exc:
            return PROVIDER_ERROR, FINISH_ERROR, f"the harness {' '.join(command)!r} could not start: {exc}"
        errors = asyncio.create_task(_tail(process.stderr, defaults.MCP_AGENT_STDERR_TAIL))
        exited = asyncio.create_task(process.wait())
        ended = asyncio.create_task(session.ended.wait())
        try:
            done, _ = await asyncio.wait({exited, ended}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
            if ended in done and exited not in done:  # over in the world: the harness has a moment to close
                done, _ = await asyncio.wait({exited}, timeout=grace_s)
        finally:
            ended.cancel()
            if process.returncode is None:
                process.kill()
            await exited
            stderr = await errors
    if session.ending is not None:
        return session.ending[0], session.ending[1], session.error
    if exited not in done:
        return PROVIDER_ERROR, FINISH_ERROR, (f"the harness {' '.join(command)!r} ran past its {timeout_s:g} s "
                                              f"timeout; its stderr ends:\n{stderr.strip()[-500:]}")
    if process.returncode != 0:
        return PROVIDER_ERROR, FINISH_ERROR, (f"the harness {' '.join(command)!r} exited with status "
                                              f"{process.returncode}; its stderr ends:\n{stderr.strip()}")
    return AGENT_ERROR, FINISH_AGENT_EXITED, None


async def run_harness_rollout(spec: RolloutSpec, policy: Policy, *, domain: Domain, state: State, gateway: Gateway,
                              max_turns: int = defaults.MAX_TURNS,
                              timeout_s: float = defaults.MCP_AGENT_TIMEOUT_S) -> dict[str, Any]:
    """Play one rollout with the harness the policy's `mcp-agent:` model names and return its row."""
    situation = spec.situation
    seed = sample_seed(situation.situation_id, spec.phrasing_index, spec.sample_index)
    agent_sampling = Sampling(policy.temperature, policy.top_p, policy.max_tokens, seed)
    user_sampling = Sampling(1.0, 1.0, policy.max_tokens, seed)
    episode = Episode(situation, domain=domain, state=state, phrasing_index=spec.phrasing_index,
                      system_prompt=policy.system_prompt)
    session = WorldSession(episode, gateway=gateway, user_model=policy.user_model, user_sampling=user_sampling,
                           max_turns=max_turns)
    command = harness_command(gateway.config(policy.model).model)
    started = time.perf_counter()
    async with _slot():
        status, finish, error = await play(session, command, seed, timeout_s=timeout_s)
    if session.fatal is not None:
        raise session.fatal  # auth and quota errors stop the run, as they do for a chat model's rollout
    calls = session.user_calls
    usage = (sum(c.prompt_tokens for c in calls), sum(c.cost for c in calls), len(calls), 0)
    return await finished_row(spec, policy, episode=episode, gateway=gateway, status=status, finish=finish,
                              error=gateway.redact(error) if error else None, turns=[], agent_sampling=agent_sampling,
                              user_sampling=user_sampling, usage=usage, dropped=set(), started=started)
