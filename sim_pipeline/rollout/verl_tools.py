"""verl adapter: the sandbox world as verl native tools, and the grader as verl's custom reward function.

Needs verl (the `[verl]` extra, in a venv of its own: `make test-verl`); nothing else in sim_pipeline imports this.

verl 0.9's `ToolAgentLoop` (agent_name `tool_agent`) keeps no tool object per episode: for every call it does
`create(create_kwargs=row's tools_kwargs[tool])`, `execute(instance_id, arguments, agent_data=...)`, `release`. So the
episode lives in the trajectory, not in the tool: each call rebuilds the row's world from the situation its
create_kwargs carry, redoes the steps recorded so far (`agent_data.extra_fields`), runs the new call, and appends it
to the record (append, not replace: calls of one turn run concurrently). verl hands `extra_fields` to the reward
function as `extra_info` (its `tool_extra_fields`), where `compute_score` replays the steps in a fresh world and
grades the episode with the model's closing message: the conduct rules, then the state oracle, exactly as
`sandbox_reward` does for TRL. The user's replies are part of the record, so replay never asks the user model again.

`sim-pipeline export --format verl` writes the rows (with `tools_kwargs`) and `tool_config.yaml` (every domain tool
and `message_user` bound to `SandboxTool`); docs/training.md "Training recipes" gives the verl command line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import cache
from typing import Any
from uuid import uuid4

from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from sim_pipeline import defaults
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.models.gateway import Gateway
from sim_pipeline.registry import load_models
from sim_pipeline.rollout.environment import (
    SandboxEnvironment,
    environment_class,
    episode_reward,
    final_text,
    replayed,
    run_tool,
)
from sim_pipeline.situation import Situation

STEPS_FIELD = "sim_pipeline_steps"  # agent_data.extra_fields key: the episode's replayable steps
ERRORS_FIELD = "sim_pipeline_errors"  # ... and the calls that failed (the user model, after the gateway's retries)
MESSAGES_FIELD = "sim_pipeline_messages"  # the trajectory's message list itself: verl appends the closing turn to it


@cache
def _environment(domain: str, user_model: str = defaults.DEFAULT_USER_MODEL,
                 registry: str = "") -> type[SandboxEnvironment]:
    """One environment class per domain and user model per process (it caches each seed's world); a registry
    file resolves a user model named in its `models:` (endpoint, key variable, parameters)."""
    gateway = Gateway(fast_path=True, models=load_models(registry)) if registry else None
    return environment_class(domain, user_model=user_model, gateway=gateway)


class SandboxTool(BaseTool):
    """One domain tool (or message_user) run in the sandbox world of the trajectory's situation.

    Tool config `config`: `domain` (required), `user_model` (default the embedded `sim/user`; a litellm model
    string, or a name from the `models:` of the registry file `registry`).
    """

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema) -> None:
        super().__init__(config, tool_schema)
        if not config.get("domain"):
            raise SimPipelineError(
                f"verl tool config: tool '{self.name}' has no config.domain. Fix: use the tool_config.yaml that "
                "`sim-pipeline export --format verl` writes, or add `domain: <name>` under the tool's config")
        self._environment = _environment(str(config["domain"]), str(config.get("user_model") or defaults.DEFAULT_USER_MODEL),
                                         str(config.get("registry") or ""))
        self._bindings: dict[str, Mapping[str, Any]] = {}

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, ToolResponse]:
        """Bind a call to its row: `create_kwargs` carries the row's situation (JSON) and phrasing index."""
        instance_id = instance_id or uuid4().hex
        binding = kwargs.get("create_kwargs") or {}
        if not binding.get("situation"):
            raise SimPipelineError(
                f"verl tool '{self.name}': the row's tools_kwargs give no situation, so the tool cannot rebuild "
                "its world. Fix: train on the grpo.parquet of `sim-pipeline export --format verl` (its "
                "extra_info.tools_kwargs bind every tool to the row's situation)")
        self._bindings[instance_id] = binding
        return instance_id, ToolResponse()

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> tuple[ToolResponse, float,
                                                                                                   dict]:
        """Run the call in the trajectory's world (rebuilt from its record) and record it."""
        binding = self._bindings[instance_id]
        agent_data = kwargs.get("agent_data")
        if agent_data is None:
            raise SimPipelineError(
                f"verl called tool '{self.name}' without agent_data, so the episode cannot be recorded. Fix: run "
                "the rows with verl's tool agent loop (agent_name tool_agent, verl >= 0.9), as exported")
        fields: dict[str, Any] = agent_data.extra_fields
        record = fields.setdefault(STEPS_FIELD, [])
        fields[MESSAGES_FIELD] = agent_data.messages
        env = replayed(self._environment, str(binding["situation"]), int(binding.get("phrasing_index") or 0), record)
        done = len(env.steps)
        try:
            text = await run_tool(env, self.name, parameters)
        except SimPipelineError as exc:  # verl would only show the policy an error text: the reward must know
            fields.setdefault(ERRORS_FIELD, []).append(f"{self.name}: {exc}")
            raise
        record.extend(env.steps[done:])
        return ToolResponse(text=text), 0.0, {}

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Forget the call's binding."""
        self._bindings.pop(instance_id, None)


def closing_message(messages: Any, solution_str: str) -> str:
    """The model's closing message as the user reads it: its last assistant turn if that made no tool call ('' if
    it did: the episode was cut off mid-action); the decoded response when the trajectory's messages are not
    recorded (no tool call). Reasoning blocks are removed."""
    if not messages:
        return final_text(solution_str)
    last = next((m for m in reversed(list(messages)) if m.get("role") == "assistant"), None)
    if last is None or last.get("tool_calls"):
        return ""
    return final_text([last])


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: dict | None = None,
                  **_: Any) -> dict[str, Any]:
    """verl custom reward function: replay the episode's recorded steps in a fresh world and grade it."""
    truth = json.loads(ground_truth)
    info = extra_info or {}
    situation = info.get("situation")
    if not situation:
        raise SimPipelineError(
            f"verl reward for {data_source}: the row's extra_info has no situation. Fix: train on the grpo.parquet "
            "of `sim-pipeline export --format verl`")
    found = Situation.from_row(json.loads(situation))
    if found.situation_id != truth.get("situation_id"):
        raise SimPipelineError(
            f"verl reward for {data_source}: ground_truth names situation {truth.get('situation_id')} but "
            f"extra_info carries {found.situation_id}. Fix: re-export; do not mix columns of different rows")
    errors = info.get(ERRORS_FIELD) or []
    if errors:  # a dead user model must stop the run, not train on episodes it never answered
        raise SimPipelineError(f"verl reward for {data_source}: {len(errors)} tool call(s) of this episode failed, "
                               f"first: {errors[0]}. Fix the backend (its endpoint, key, limits), then train again")
    steps = info.get(STEPS_FIELD) or []
    # The user model is never asked on replay (its replies are in the steps): any user model's class will do.
    env = replayed(_environment(str(truth["domain"])), situation,
                   int(info.get("phrasing_index") or 0), steps)
    reward = episode_reward(env, closing_message(info.get(MESSAGES_FIELD), solution_str))
    return {"score": reward, "tool_steps": len(steps)}
