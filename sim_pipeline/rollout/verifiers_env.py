"""verifiers adapter: a domain as a verifiers environment (a multi-turn tool taskset whose reward is the grade).

Needs verifiers (the `[rlenv]` extra, in a venv of its own: `make test-rlenv`); nothing else in sim_pipeline imports
this. verifiers finds a taskset by a top-level module name, so `sim_pipeline_verifiers` re-exports these classes:
`vf eval sim-pipeline-verifiers --env.taskset.domain retail --env.taskset.data-files <grpo.parquet>`.

verifiers 0.4 (`verifiers.v1`) runs an agent harness (a program: here its built-in chat loop), which reaches the
model through verifiers' interception and the tools through MCP servers; a rollout's `State` travels between the
host and the tool servers over verifiers' state channel. So, as in the verl adapter, the episode lives in that
state, not in a tool process:
- `SandboxTaskset` yields one `SandboxTask` per row of the GRPO export of `sim-pipeline export --format trl` (its
  `situation` JSON and `phrasing_index`); the task's `setup` writes them into the rollout's `SandboxState`;
- `SandboxToolset`, one MCP server shared by every rollout, lists every domain tool with the pack's own JSON schema
  and `message_user` (answered by the simulated user). Each call rebuilds the rollout's world from the state's
  situation and recorded steps (`replayed`: the user's replies are reused, never asked again), runs the call, and
  appends it to the steps;
- the task's reward `sandbox_reward` replays the recorded steps in a fresh world and grades the episode with the
  model's closing message (its last message, without a tool call): the conduct rules, then the state oracle,
  exactly as `sandbox_reward` does for TRL. A replayed rollout earns its graded reward by construction;
- `LocalChatHarness` is verifiers' own `null` chat program run by this venv's Python: the stock harness builds a
  uv environment for it at run time (network), while every package it declares is already installed beside
  verifiers here.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import inspect
import json
import sys
import weakref
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
import verifiers.v1 as vf
from verifiers.v1.harnesses.null.harness import NullHarness
from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE, launch_chat_program
from verifiers.v1.mcp.server import STATE_ROUTE_PARAM, _request_query

from sim_pipeline import defaults
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.protocol.transcript import visible_text
from sim_pipeline.rollout.environment import (
    SandboxEnvironment,
    environment_class,
    environment_functions,
    episode_reward,
    replayed,
    run_tool,
)
from sim_pipeline.situation import Situation

_ABSENT = object()  # an optional argument the model left out: the world must not see it at all


class SandboxState(vf.State):
    """A rollout's episode: its situation and the replayable steps so far."""

    situation: str = ""
    phrasing_index: int = 0
    steps: list[dict[str, Any]] = []
    errors: list[str] = []  # calls that failed (the user model, after the gateway's retries)


class SandboxData(vf.TaskData):
    """One row of the GRPO export: the situation (JSON) and the phrasing the user opens with."""

    domain: str
    situation: str
    phrasing_index: int = 0


class SandboxToolsetConfig(vf.SharedToolsetConfig):
    """The tool server's domain, and the simulated user's model (the embedded `sim/user` unless named)."""

    domain: str = ""
    user_model: str = defaults.DEFAULT_USER_MODEL


class SandboxTasksetConfig(vf.TasksetConfig):
    """The domain, the GRPO export to play (Parquet or JSON lines), and the simulated user's model."""

    domain: str = ""
    data_files: str = ""
    user_model: str = defaults.DEFAULT_USER_MODEL


@cache
def _environment(domain: str, user_model: str = defaults.DEFAULT_USER_MODEL) -> type[SandboxEnvironment]:
    """One environment class per domain and user model per process (it caches each seed's world)."""
    return environment_class(domain, user_model=user_model)


class SandboxToolset(vf.Toolset[SandboxToolsetConfig, SandboxState]):
    """Every domain tool and message_user, run in the world of the calling rollout (rebuilt from its state)."""

    TOOL_PREFIX = None  # the pack's own tool names, unprefixed

    def register(self, mcp: Any) -> None:
        """Add one MCP tool per domain tool (and message_user), advertising the pack's schema as written."""
        if not self.config.domain:
            raise SimPipelineError("verifiers tool server: no domain. Fix: set --env.taskset.domain <name>")
        locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()  # one per rollout
        for function in environment_functions(_environment(self.config.domain)):
            name = function["name"]
            schema = dict(function.get("parameters") or {"type": "object", "properties": {}})
            mcp.add_tool(self._one_at_a_time(self._with_state(self._call(name, schema)), locks), name=name,
                         description=function.get("description") or None)
            # The SDK derives a schema from the signature (every argument `Any`, so the world, not pydantic, judges
            # the values); the model must see the pack's own, with its patterns, enums and bounds.
            mcp._tool_manager.get_tool(name).parameters = schema

    def _one_at_a_time(self, fn: Any, locks: weakref.WeakValueDictionary[str, asyncio.Lock]) -> Any:
        """Run a rollout's calls one by one: each pulls the state, appends its step and pushes the whole state back,
        so two calls of one turn run at once would drop a step (a write the reward would never see)."""

        @functools.wraps(fn)
        async def call(*args: Any, **kwargs: Any) -> Any:
            route = _request_query(STATE_ROUTE_PARAM) or ""  # the calling rollout (verifiers' state route)
            lock = locks.setdefault(route, asyncio.Lock())
            async with lock:
                return await fn(*args, **kwargs)

        call.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
        return call

    def _call(self, name: str, schema: dict[str, Any]) -> Any:
        """The tool body: replay the rollout's steps in a fresh world, run this call, record it."""
        properties = list((schema.get("properties") or {}))

        async def call(**arguments: Any) -> str:
            state = self.state
            if not state.situation:
                raise SimPipelineError(
                    f"verifiers tool '{name}': the rollout's state has no situation. Fix: play the tasks of "
                    "sim_pipeline_verifiers' taskset (its setup binds each rollout to its row)")
            env = replayed(_environment(self.config.domain, self.config.user_model), state.situation,
                           state.phrasing_index, state.steps)
            done = len(env.steps)
            given = {k: v for k, v in arguments.items() if v is not _ABSENT}
            try:
                text = await run_tool(env, name, given)
            except SimPipelineError as exc:  # the model would only read an error: the reward must know
                state.errors = [*state.errors, f"{name}: {exc}"]
                raise
            state.steps = [*state.steps, *env.steps[done:]]
            return text

        call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(p, inspect.Parameter.KEYWORD_ONLY, default=_ABSENT, annotation=Any)
             for p in properties], return_annotation=str)
        call.__name__ = name
        return call


def closing_message(trace: vf.Trace) -> str:
    """The model's closing message as the user reads it: its last message if that made no tool call ('' if it did:
    the episode was cut off mid-action). Reasoning blocks are removed."""
    answers = trace.assistant_messages
    if not answers or answers[-1].tool_calls:
        return ""
    content = answers[-1].content
    if isinstance(content, list):  # content parts
        content = " ".join(str(getattr(p, "text", "") or "") for p in content)
    return visible_text(str(content or ""))


class SandboxTask(vf.Task[SandboxData, SandboxState]):
    """One row's episode: bound to its situation at setup, graded by replaying its recorded steps."""

    async def setup(self, trace: vf.Trace, runtime: Any) -> None:
        """Bind the rollout's state to the row, so the shared tool server plays its world."""
        trace.state.situation = self.data.situation
        trace.state.phrasing_index = self.data.phrasing_index
        trace.state.steps = []

    @vf.reward
    async def sandbox_reward(self, task: SandboxData, trace: vf.Trace) -> float:
        """The conduct rules, then the state oracle, on the episode replayed from its recorded steps."""
        state = trace.state
        if state.errors:  # a dead user model must stop the run, not train on episodes it never answered
            raise SimPipelineError(f"verifiers reward: {len(state.errors)} tool call(s) of this episode failed, "
                                   f"first: {state.errors[0]}. Fix the backend, then run again")
        # The user model is never asked on replay (its replies are in the steps).
        env = replayed(_environment(task.domain), task.situation, task.phrasing_index, state.steps)
        return episode_reward(env, closing_message(trace))


class SandboxTaskset(vf.Taskset[SandboxTask, SandboxTasksetConfig]):
    """The rows of a GRPO export of one domain, each a task played in the sandbox world."""

    def load(self) -> Iterator[SandboxTask]:
        """One task per row: its prompt is the row's opening (system prompt and the user's first message)."""
        config = self.config
        path = Path(config.data_files)
        if not config.domain or not path.is_file():
            raise SimPipelineError(
                f"verifiers taskset: domain '{config.domain}', data_files '{config.data_files}'. Fix: set "
                "--env.taskset.domain and --env.taskset.data-files to the grpo file `sim-pipeline export --format "
                "trl` writes (a Parquet or JSON lines file with a `situation` column)")
        rows = pd.read_parquet(path) if path.suffix == ".parquet" else pd.read_json(path, lines=True)
        environment = _environment(config.domain, config.user_model)
        for row in rows.to_dict("records"):
            situation = str(row["situation"])
            phrasing = int(row.get("phrasing_index") or 0)
            env = environment()
            env.reset(situation=situation, phrasing_index=phrasing)  # refuses a row of another domain, with the fix
            opening = env.episode.messages
            found = Situation.from_row(json.loads(situation))
            yield SandboxTask(SandboxData(
                id=f"{found.situation_id}:{phrasing}", name=found.situation_id, domain=config.domain,
                situation=situation, phrasing_index=phrasing,
                system_prompt=next((m["content"] for m in opening if m["role"] == "system"), None),
                prompt=[{"role": "user", "content": m["content"]} for m in opening if m["role"] == "user"]),
                config.task)

    @classmethod
    def toolsets(cls, config: SandboxTasksetConfig) -> list[vf.Toolset]:
        """The domain's tool server, shared by every rollout (each call carries its rollout's state)."""
        return [SandboxToolset(SandboxToolsetConfig(domain=config.domain, user_model=config.user_model))]


class _VenvScripts:
    """A runtime whose PEP 723 scripts run on this venv's Python instead of a uv environment built at run time."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    async def prepare_uv_script(self, script: str | bytes, env: dict[str, str] | None = None, *,
                                activate: bool = True) -> list[str]:
        data = script.encode() if isinstance(script, str) else script
        path = f".vf-scripts/{hashlib.sha256(data).hexdigest()}.py"
        await self._runtime.write(path, data)
        return [sys.executable, path]


class LocalChatHarness(NullHarness):
    """verifiers' built-in chat loop (the `null` harness's program), run by this venv's Python."""

    async def setup(self, runtime: Any) -> None:
        """Nothing to build: the program's packages are installed beside verifiers."""

    async def launch(self, ctx: Any, trace: vf.Trace, runtime: Any, endpoint: str, secret: str,
                     mcp_urls: dict[str, str], data: vf.TaskData, tool_interception_url: str | None = None) -> Any:
        """Run the chat program against the intercepted model endpoint and the tool servers."""
        system_prompt, prompt = self.resolve_prompt(data)
        extra = [f"--tool-interception-url={tool_interception_url}"] if tool_interception_url else ()
        return await launch_chat_program(CHAT_PROGRAM_SOURCE, self.config, ctx, trace, _VenvScripts(runtime),
                                         endpoint, secret, mcp_urls, system_prompt, prompt, extra_args=extra)


if __name__ == "__main__":  # verifiers starts a tool server as `python -m <its module>`
    SandboxToolset.run()
