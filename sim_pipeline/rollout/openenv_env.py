"""OpenEnv adapter: a domain's sandbox world as an OpenEnv environment (reset/step/state, the tools over MCP).

Needs openenv-core (the `[rlenv]` extra, in a venv of its own: `make test-rlenv`); nothing else in sim_pipeline imports
this.

OpenEnv 0.3's `MCPEnvironment` answers `ListToolsAction` and `CallToolAction` from an MCP server (FastMCP) and hands
every other action to `_step_impl`. Here `openenv_environment(domain)` builds that class for a domain:
- `reset(situation=..., phrasing_index=...)` (the columns of a row of the GRPO export, as for TRL's
  `environment_factory`) starts the row's situation in a fresh sandbox; the observation's metadata carries the prompt;
- the MCP server lists every domain tool with the pack's own JSON schema (no type-hint round trip: patterns, bounds
  and nested shapes reach the model as written) and `message_user`, answered by the simulated user; a call runs in
  the world exactly as `rollout/environment.py` runs it, so a call outside the schema is answered and recorded;
- the episode ends, as in TRL, with the model's message that makes no tool call: `closing_action(text)` (an
  `Action` whose metadata carries it). That step's observation is `done` and its `reward` is the episode's grade:
  the conduct rules, then the state oracle (`SandboxRubric`, the environment's `rubric`);
- `state` is a `SandboxState`: the situation, and the replayable `steps` (each call with its arguments, each message
  with the user's reply), so a reward worker elsewhere rebuilds the episode with `replayed` and earns the same grade
  without asking the user again. `SandboxEnvClient` is the matching client (OpenEnv's MCP client keeps only the
  episode id and step count of a state).

`openenv_app(domain)` is the FastAPI app OpenEnv serves (`uvicorn`), one environment per WebSocket session.
"""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP
from fastmcp.tools import Tool
from fastmcp.tools.base import ToolResult
from openenv.core.env_server.http_server import create_fastapi_app
from openenv.core.env_server.mcp_environment import MCPEnvironment
from openenv.core.env_server.types import Action, Observation, State
from openenv.core.mcp_client import MCPToolClient
from openenv.core.rubrics.base import Rubric
from pydantic import Field, PrivateAttr

from sim_pipeline import defaults
from sim_pipeline.domain import Domain, load_domain
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.rollout.environment import (
    SandboxEnvironment,
    environment_class,
    environment_functions,
    episode_reward,
    run_tool,
)

CLOSING_KEY = "closing_message"  # the closing action's metadata key: the model's last message, without a tool call


class SandboxState(State):
    """The episode as a reward worker needs it: the situation and the replayable steps."""

    situation_id: str | None = None
    phrasing_index: int = 0
    steps: list[dict[str, Any]] = Field(default_factory=list)
    reward: float | None = None  # set once the closing message is graded


def closing_action(message: str) -> Action:
    """The step that ends the episode: the model's last message, the one without a tool call."""
    return Action(metadata={CLOSING_KEY: message})


class SandboxRubric(Rubric):
    """The grade of a closed episode: the conduct rules, then the state oracle (as `sandbox_reward` for TRL)."""

    def __init__(self, environment: SandboxOpenEnv) -> None:
        super().__init__()
        self._environment = environment  # not a child rubric: a plain reference

    def forward(self, action: Any, observation: Any) -> float:
        """The episode's reward once `action` closed it."""
        return episode_reward(self._environment.sandbox, str(action.metadata[CLOSING_KEY]))


class _WorldTool(Tool):
    """One domain tool (or message_user) with the pack's input schema, run in the environment's sandbox."""

    _environment: Any = PrivateAttr(default=None)

    async def run(self, arguments: dict[str, Any]) -> ToolResult:
        """Run the call in the world and answer what the model reads back (the JSON result, or the user's reply)."""
        text = await run_tool(self._environment.sandbox, self.name, arguments)
        return ToolResult(content=text, structured_content={"result": text})


_RESULT_SCHEMA = {"type": "object", "properties": {"result": {"type": "string"}}, "required": ["result"],
                  "x-fastmcp-wrap-result": True}  # the client reads the text back as the call's data


class SandboxOpenEnv(MCPEnvironment):
    """One OpenEnv session of a domain: the sandbox world of the row's situation, its user, and the transcript."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session has its own sandbox episode; the seed worlds are copied
    sandbox_class: type[SandboxEnvironment]

    def __init__(self) -> None:
        server = FastMCP(f"sim-pipeline-{self.sandbox_class.domain.name}")
        for function in environment_functions(self.sandbox_class):
            tool = _WorldTool(name=function["name"], description=function.get("description") or "",
                              parameters=dict(function.get("parameters") or {"type": "object", "properties": {}}),
                              output_schema=_RESULT_SCHEMA)
            tool._environment = self
            server.add_tool(tool)
        super().__init__(server)
        self.rubric = SandboxRubric(self)
        self._sandbox: SandboxEnvironment | None = None
        self._state = SandboxState()

    @property
    def sandbox(self) -> SandboxEnvironment:
        """The sandbox episode in play (after `reset`)."""
        if self._sandbox is None:
            raise SimPipelineError("the OpenEnv environment has no episode yet. Fix: call reset(situation=...) "
                                   "with a row of `sim-pipeline export --format trl` first")
        return self._sandbox

    def reset(self, seed: int | None = None, episode_id: str | None = None, situation: str | None = None,
              phrasing_index: int = 0, prompt: Any = None, **_: Any) -> Observation:
        """Start the row's situation in a fresh sandbox; the observation carries the prompt the model opens with."""
        sandbox = self.sandbox_class()
        sandbox.reset(situation=situation, phrasing_index=phrasing_index, prompt=prompt)
        self._sandbox = sandbox
        self._state = SandboxState(episode_id=episode_id, situation_id=sandbox.episode.situation.situation_id,
                                   phrasing_index=int(phrasing_index))
        return Observation(metadata={"prompt": sandbox.episode.messages})

    def _step_impl(self, action: Action, timeout_s: float | None = None, **_: Any) -> Observation:
        """The closing message (the only action that is not an MCP call): grade the episode, end it."""
        if CLOSING_KEY not in action.metadata:
            raise SimPipelineError(
                f"OpenEnv action {action.model_dump()} is neither an MCP tool call nor a closing message. Fix: "
                f"send the model's message without a tool call as closing_action(text) (metadata '{CLOSING_KEY}')")
        reward = self.rubric(action, None)
        self._state.reward = reward
        return Observation(done=True, reward=reward, metadata={"steps": self.sandbox.steps})

    @property
    def state(self) -> SandboxState:
        """The episode's situation, step count and replayable steps."""
        if self._sandbox is not None:
            self._state.steps = list(self._sandbox.steps)
            self._state.step_count = len(self._sandbox.steps)
        return self._state


class SandboxEnvClient(MCPToolClient):
    """OpenEnv's MCP tool client, keeping the whole `SandboxState` of a state request."""

    def _parse_state(self, payload: dict[str, Any]) -> SandboxState:
        return SandboxState.model_validate(payload)


def openenv_environment(domain: Domain | str, *, user_model: str = defaults.DEFAULT_USER_MODEL,
                        gateway: Gateway | None = None) -> type[SandboxOpenEnv]:
    """The OpenEnv environment class of a domain (keep one per process: it caches each seed's world)."""
    domain = load_domain(domain) if isinstance(domain, str) else domain
    sandbox_class = environment_class(domain, user_model=user_model, gateway=gateway)
    return type(f"{sandbox_class.__name__}OpenEnv", (SandboxOpenEnv,),
                {"sandbox_class": sandbox_class, "__module__": __name__})


def openenv_app(domain: Domain | str, *, user_model: str = defaults.DEFAULT_USER_MODEL,
                gateway: Gateway | None = None, max_concurrent_envs: int = defaults.OPENENV_MAX_SESSIONS) -> Any:
    """The FastAPI app serving the domain's environment (one per WebSocket session): run it with uvicorn."""
    environment = openenv_environment(domain, user_model=user_model, gateway=gateway)
    return create_fastapi_app(environment, Action, Observation, max_concurrent_envs=max_concurrent_envs)
