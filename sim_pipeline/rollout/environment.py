"""An RL environment over the sandbox world, for trainers that generate their own episodes (TRL's GRPOTrainer).

TRL's `environment_factory` contract (GRPOTrainer, TRL >= 1.14): the trainer makes one environment per rollout and
calls `reset(**row)` with the dataset row; every public method is a tool whose JSON schema transformers derives
from the method's name, type hints and Google docstring; the trainer calls tools as the model asks and appends
their return values as tool messages; an episode ends when the model answers without a tool call; reward
functions receive the finished `environments` beside the completions.

Here `environment_class(domain)` builds that class for a domain:
- `reset(situation=..., phrasing_index=..., prompt=...)` rebuilds the row's situation (the GRPO export carries it as
  JSON) in a fresh sandbox of its seed's world;
- one method per domain tool. Its schema becomes type hints: enums survive (as `Literal`), nested object shapes,
  string patterns and bounds do not (transformers cannot express them), so the world still checks each call
  against the full schema and answers a rejection that names the field;
- `message_user(message)`: the agent's words to the simulated user, who answers (`sim/user` by default, any
  litellm user model through the gateway). TRL ends an episode at the first turn without a tool call, so a
  question or a confirmation request goes through this tool, and that final turn is the closing message;
- `sandbox_reward(completions, environments)`: the conduct rules, then the state oracle on the episode's
  transcript, combined as the grade step combines conduct and judge. The oracle's program label is what the
  judge is validated against; the LLM judge itself is not called inside the training loop.

An environment records what happened as plain `steps` (each call with its arguments; each message to the user
with the user's reply and decision) and `replayed(environment_class, situation, phrasing_index, steps)` rebuilds
the same episode in a fresh world without asking the user model again: trainers that keep no environment object
between tool calls or hand the episode to a reward worker in another process (verl, `rollout/verl_tools.py`)
carry the steps instead. Private methods stay private because TRL turns every public method into a tool;
`replayed`, `run_tool` and `episode_reward` reach them.
"""

from __future__ import annotations

import inspect
import json
import keyword
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Literal, Union

from sim_pipeline import defaults
from sim_pipeline.domain import Domain, load_domain
from sim_pipeline.errors import SimPipelineError
from sim_pipeline.grade import conduct
from sim_pipeline.grade.grading import combine
from sim_pipeline.models.gateway import Gateway, ProviderError, Sampling
from sim_pipeline.protocol.environment_tools import MESSAGE_USER, RESERVED_TOOL_NAMES
from sim_pipeline.protocol.transcript import visible_text
from sim_pipeline.protocol.user_events import ENDING
from sim_pipeline.rollout.episode import Episode, full_message, text_message
from sim_pipeline.rollout.runner import sample_seed
from sim_pipeline.situation import Situation
from sim_pipeline.world.state import State, build_state

_RESERVED = ("reset", *RESERVED_TOOL_NAMES)  # TRL's own method, then the protocol's tools (a pack refuses those)
_SCALARS: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict}


class SandboxEnvironment:
    """One training episode of a domain: the world of the row's situation, its user, and the transcript."""

    domain: ClassVar[Domain]
    user_model: ClassVar[str] = defaults.DEFAULT_USER_MODEL
    gateway: ClassVar[Gateway]
    _states: ClassVar[dict[int, State]]

    def __init__(self) -> None:
        self._episode: Episode | None = None
        self._over = False  # the user has left or is satisfied: later messages reach no one
        self._seed = 0
        self.steps: list[dict[str, Any]] = []  # what happened, replayable (see the module docstring)

    def reset(self, situation: str | None = None, phrasing_index: int = 0, prompt: Any = None,
              **_: Any) -> None:
        """Start the row's situation in a fresh sandbox (TRL passes every column of the row)."""
        if not situation:
            raise SimPipelineError(
                "the training row has no `situation` column, so the environment cannot rebuild its world. Fix: "
                "train on the GRPO file written by `sim-pipeline export --format trl` (it carries the situation)")
        found = Situation.from_row(json.loads(situation))
        if found.domain != self.domain.name:
            raise SimPipelineError(
                f"the row's situation {found.situation_id} belongs to domain '{found.domain}', this environment "
                f"to '{self.domain.name}'. Fix: build the environment with environment_class('{found.domain}')")
        if found.seed not in self._states:
            self._states[found.seed] = build_state(self.domain, found.seed)
        self._episode = Episode(found, domain=self.domain, state=self._states[found.seed],
                                phrasing_index=int(phrasing_index))
        if isinstance(prompt, list) and prompt:  # the model sees the row's prompt: record that, not a rebuilt one
            self._episode.messages = [full_message(dict(m)) for m in prompt]
        self._over = False
        self._seed = sample_seed(found.situation_id, int(phrasing_index), 0)
        self.steps = []

    def _replay(self, steps: Iterable[Mapping[str, Any]]) -> None:
        """Redo recorded steps in this (reset) episode: calls run in the world again, the user's replies are reused."""
        for step in steps:
            if step.get("tool") == MESSAGE_USER:
                self.episode.reply(text_message("assistant", str(step["message"])))
                self.episode.hear(str(step["reply"]), str(step["decision"]))
                self._over = step["decision"] in ENDING
                self.steps.append(dict(step))
            else:
                self._call_tool(str(step["tool"]), step.get("arguments") or {})

    @property
    def episode(self) -> Episode:
        """The episode in play (after `reset`)."""
        if self._episode is None:
            raise SimPipelineError("the environment has no episode yet. Fix: call reset(**row) first")
        return self._episode

    def _call_tool(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one call the model made in the world and record it as an agent turn; returns the result as JSON."""
        episode = self.episode
        if self._turns() >= defaults.MAX_TURNS:
            return json.dumps({"status": "rejected", "error": "turn_cap",
                               "message": f"the conversation is over its {defaults.MAX_TURNS} agent turns"})
        call = {"id": f"call_{len(episode.messages)}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(dict(arguments), sort_keys=True)}}
        (result,) = episode.act({"role": "assistant", "content": None, "tool_calls": [call]})
        self.steps.append({"tool": name, "arguments": dict(arguments)})
        return json.dumps(result, sort_keys=True)

    async def message_user(self, message: str) -> str:
        """Send the customer a message (a question, a confirmation request or an update) and return their reply.

        Your last message, the one without a tool call, closes the conversation; use this tool for everything
        you say before it.

        Args:
            message: What you say to the customer.
        """
        episode = self.episode
        if self._over:
            return "(The customer has left the conversation.)"
        if self._turns() >= defaults.MAX_TURNS:
            return f"(The conversation is over its {defaults.MAX_TURNS} agent turns.)"
        if not message.strip():
            return "(Your message was empty: nothing was sent.)"
        episode.reply({"role": "assistant", "content": message})
        sampling = Sampling(1.0, 1.0, defaults.ENVIRONMENT_USER_MAX_TOKENS, self._seed)
        try:
            _, decision = await episode.user_turn(self.gateway, self.user_model, sampling)
        except ProviderError as exc:
            raise SimPipelineError(f"the simulated user ({self.user_model}) failed: {exc}") from exc
        self._over = decision in ENDING
        reply = episode.messages[-1]["content"]
        self.steps.append({"tool": MESSAGE_USER, "message": message, "reply": reply, "decision": decision})
        return reply

    def _turns(self) -> int:
        return sum(1 for m in self.episode.messages if m["role"] == "assistant")

    def _grade(self, final_text: str) -> float:
        """Close the episode with the model's last message and grade it: conduct rules, then the state oracle."""
        episode = self.episode
        episode.messages.append(text_message("assistant", final_text))
        events = episode.tool_events()
        violation = conduct.check(episode.messages, events, final_text, self.domain, episode.user_events,
                                  episode.situation.want)
        reward = combine(violation.reward if violation else 1.0, episode.verdict().reward)
        return float(reward if reward is not None else 0.0)


# message_user's one argument, as every adapter advertises it (TRL reads the method's signature instead).
MESSAGE_USER_SCHEMA: dict[str, Any] = {"type": "object", "properties": {"message": {
    "type": "string", "description": "What you say to the customer."}}, "required": ["message"]}


def environment_functions(environment: type[SandboxEnvironment]) -> list[dict[str, Any]]:
    """The tools a model sees in an environment: the pack's function schemas, then message_user (its doc's summary)."""
    doc = (SandboxEnvironment.message_user.__doc__ or "").split("Args:")[0]
    return [s["function"] for s in environment.domain.tool_schemas] + [
        {"name": MESSAGE_USER, "description": " ".join(doc.split()), "parameters": MESSAGE_USER_SCHEMA}]


def final_text(completion: Any) -> str:
    """The model's closing message as the user reads it (reasoning blocks removed): the last assistant text of a
    conversational completion, or the text itself."""
    if isinstance(completion, str):
        return visible_text(completion)
    texts = [m.get("content") for m in completion or [] if m.get("role") == "assistant"]
    last = texts[-1] if texts else ""
    if isinstance(last, list):  # content parts
        return visible_text(" ".join(str(p.get("text", "")) for p in last if isinstance(p, dict)))
    return visible_text(str(last or ""))


def sandbox_reward(completions: list[Any], environments: list[SandboxEnvironment], **_: Any) -> list[float]:
    """TRL reward function: each episode's graded reward (conduct rules, then the state oracle)."""
    return [env._grade(final_text(c)) for c, env in zip(completions, environments, strict=True)]


def replayed(environment: type[SandboxEnvironment], situation: str, phrasing_index: int,
             steps: Iterable[Mapping[str, Any]]) -> SandboxEnvironment:
    """A fresh environment of the row's situation with the recorded steps redone in it."""
    env = environment()
    env.reset(situation=situation, phrasing_index=phrasing_index)
    env._replay(steps)
    return env


async def run_tool(env: SandboxEnvironment, name: str, arguments: Mapping[str, Any]) -> str:
    """Run the tool the model called (a domain tool, or message_user) and return what the model reads back."""
    if name == MESSAGE_USER:
        return await env.message_user(str(arguments.get("message", "")))
    return env._call_tool(name, arguments)


def episode_reward(env: SandboxEnvironment, closing: str) -> float:
    """The episode's graded reward once the model has closed it with this message."""
    return env._grade(closing)


def _python_type(spec: Mapping[str, Any]) -> Any:
    """A type hint transformers turns back into (most of) the JSON schema: enums as Literal, arrays typed."""
    enum = spec.get("enum")
    if enum and all(isinstance(v, str | int | float | bool) for v in enum):
        return Literal[tuple(enum)]
    kind = spec.get("type", "string")
    if isinstance(kind, list):
        options = tuple(_python_type({**spec, "type": k}) for k in kind if k != "null")
        hint = options[0] if len(options) == 1 else Union[options]  # noqa: UP007 (a runtime union of types)
        return hint | None if "null" in kind else hint
    if kind == "array":
        items = spec.get("items")
        return list[_python_type(items)] if isinstance(items, Mapping) and items else list
    return _SCALARS.get(kind, str)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _argument_doc(name: str, spec: Mapping[str, Any]) -> str:
    """An argument's docstring line: its description, and the schema keywords a type hint cannot carry."""
    text = _one_line(spec.get("description") or name.replace("_", " "))
    kept = {"type", "enum", "description"} | ({"items"} if _simple_items(spec) else set())
    rest = {k: v for k, v in spec.items() if k not in kept}
    # The model must still see a pattern, a bound or a nested shape; the world enforces them either way.
    return f"{text} Schema: {json.dumps(rest, sort_keys=True)}" if rest else text


def _simple_items(spec: Mapping[str, Any]) -> bool:
    items = spec.get("items")
    return isinstance(items, Mapping) and set(items) <= {"type", "enum", "description"}


def _tool_method(function: Mapping[str, Any]) -> Any:
    """A method named after the tool whose signature and docstring carry its schema; calling it runs the tool."""
    name = function["name"]
    parameters = function.get("parameters") or {}
    properties: Mapping[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    for arg in properties:
        if not arg.isidentifier() or keyword.iskeyword(arg):
            raise SimPipelineError(
                f"tool '{name}': argument '{arg}' is not a Python identifier, and TRL's environments expose tools as "
                f"methods with one parameter per argument. Fix: rename the argument in the tool's JSON schema")

    def method(self: SandboxEnvironment, **arguments: Any) -> str:
        return self._call_tool(name, arguments)

    ordered = sorted(properties, key=lambda a: a not in required)  # required first, as Python wants
    method.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        + [inspect.Parameter(a, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=_python_type(properties[a]),
                             default=inspect.Parameter.empty if a in required else None) for a in ordered],
        return_annotation=str)
    method.__annotations__ = {**{a: _python_type(properties[a]) for a in ordered}, "return": str}
    lines = [_one_line(function.get("description") or name.replace("_", " "))]
    if ordered:
        lines += ["", "Args:"] + [f"    {a}: {_argument_doc(a, properties[a])}" for a in ordered]
    method.__doc__ = "\n".join(lines)
    method.__name__ = method.__qualname__ = name
    return method


def environment_class(domain: Domain | str, *, user_model: str = defaults.DEFAULT_USER_MODEL,
                      gateway: Gateway | None = None) -> type[SandboxEnvironment]:
    """The environment class of a domain (pass it as GRPOTrainer's `environment_factory`)."""
    domain = load_domain(domain) if isinstance(domain, str) else domain
    methods = {}
    for schema in domain.tool_schemas:
        function = schema["function"]
        if function["name"] in _RESERVED or function["name"].startswith("_"):
            raise SimPipelineError(
                f"tool '{function['name']}' of domain '{domain.name}' clashes with the environment's own "
                f"{'methods' if function['name'] in _RESERVED else 'private names'} {list(_RESERVED)}. "
                "Fix: rename the tool")
        methods[function["name"]] = _tool_method(function)
    title = "".join(part.title() for part in domain.name.replace("-", "_").split("_"))
    attributes = {"domain": domain, "user_model": user_model, "gateway": gateway or Gateway(fast_path=True),
                  "_states": {}, "__module__": __name__, **methods}
    return type(f"{title}Environment", (SandboxEnvironment,), attributes)
