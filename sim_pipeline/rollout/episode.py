"""One conversation in the sandbox world, turn by turn: the agent's turns in, tool results and the user's replies out.

The rollout runner drives an episode with the agent model behind the gateway; the RL environment
(environment.py) drives one with a trainer's own generations. Both record the same transcript, so the conduct
rules and the state oracle grade a training episode exactly as they grade a rollout.
"""

from __future__ import annotations

import json
from typing import Any

from sim_pipeline.domain import Domain
from sim_pipeline.models.gateway import Completion, Gateway, ProviderError, Sampling
from sim_pipeline.protocol.statuses import AGENT_ERROR, OK, USER_ERROR
from sim_pipeline.protocol.transcript import tool_turns
from sim_pipeline.protocol.user_events import (
    DECISIONS,
    FINISH_EMPTY_REPLY,
    FINISH_GOAL_REACHED,
    FINISH_TRANSFERRED,
    USER_ACTION,
    USER_ACTION_CHOICE,
    USER_ACTION_TOOL,
    user_event,
)
from sim_pipeline.rollout.prompts import agent_system_prompt, user_system_prompt
from sim_pipeline.situation import Situation
from sim_pipeline.world.oracle import Verdict, goal_reached, label
from sim_pipeline.world.sandbox import Sandbox
from sim_pipeline.world.state import State


def text_message(role: str, content: str) -> dict[str, Any]:
    """A plain text turn in the transcript's full shape."""
    return {"role": role, "content": content, "tool_calls": None, "tool_call_id": None, "name": None}


def full_message(message: dict[str, Any]) -> dict[str, Any]:
    """A model's message in the transcript's full shape (absent keys as None)."""
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


class UserProtocolError(ProviderError):
    """A user reply outside the `user_action` protocol: a `user_error`, though the call was made (and paid for), so
    the row still counts its completion."""

    def __init__(self, message: str, completion: Completion) -> None:
        super().__init__(message, status=USER_ERROR)
        self.completion = completion


def _rejected_field(result: dict[str, Any]) -> str | None:
    """The argument a rejection names (its `field`, else the first of its `fields`)."""
    field = result.get("field") or (result.get("fields") or [None])[0]
    return str(field) if field else None


class Episode:
    """A situation's conversation: the agent's transcript, the user's view of it, and the world it acts on."""

    def __init__(self, situation: Situation, *, domain: Domain, state: State, phrasing_index: int,
                 system_prompt: str = "") -> None:
        self.situation = situation
        self.domain = domain
        self.sandbox = Sandbox(domain, seed=situation.seed, setup=situation.setup, state=state)
        self.opening = situation.phrasings[phrasing_index]
        self.messages = [text_message("system", agent_system_prompt(domain, system_prompt)),
                         text_message("user", self.opening)]
        self.user_view = [text_message("system", user_system_prompt(situation, domain)),
                          text_message("assistant", self.opening)]
        self.user_events: list[dict[str, Any]] = []

    def act(self, message: dict[str, Any]) -> list[dict[str, Any]]:
        """Record an agent turn with tool calls and run each call in the world; returns the results in call order."""
        self.messages.append(full_message(message))
        results = []
        for call in message["tool_calls"]:
            result = self.sandbox.call(call["function"]["name"], call["function"]["arguments"])
            self.messages.append({"role": "tool", "content": json.dumps(result, sort_keys=True), "tool_calls": None,
                                  "tool_call_id": call["id"], "name": call["function"]["name"]})
            results.append(result)
        return results

    def reply(self, message: dict[str, Any]) -> tuple[str, str] | None:
        """Record an agent turn without tool calls; (status, finish reason) when it ends the conversation."""
        self.messages.append(full_message(message))
        if not (message.get("content") or "").strip():
            return AGENT_ERROR, FINISH_EMPTY_REPLY
        if goal_reached(self.domain, self.situation, self.sandbox.events, self.sandbox.state):
            return OK, FINISH_GOAL_REACHED  # the world shows the goal met and the agent has replied
        if any(e.status == "ok" and (t := self.domain.tool(e.tool)) is not None and t.kind == "transfer"
               for e in self.sandbox.events):
            return OK, FINISH_TRANSFERRED  # a human has the conversation now; the agent has said so
        return None

    async def user_turn(self, gateway: Gateway, user_model: str, sampling: Sampling) -> tuple[Completion, str]:
        """The user's answer to the agent's last text turn, recorded; returns the completion and the decision."""
        view = [*self.user_view, text_message("user", self.messages[-1]["content"])]
        try:
            said = await gateway.complete(user_model, view, tools=[USER_ACTION_TOOL],
                                          tool_choice=USER_ACTION_CHOICE, sampling=sampling)
        except ProviderError as exc:
            raise ProviderError(f"user model {user_model}: {exc}", status=USER_ERROR) from exc
        try:
            text, decision = user_action(said.message, user_model)
        except ProviderError as exc:
            raise UserProtocolError(str(exc), said) from exc
        self.hear(text, decision)
        return said, decision

    def hear(self, text: str, decision: str) -> None:
        """Record the user's answer to the agent's last text turn (from the user model, or replayed from a record)."""
        self.user_view.append(text_message("user", self.messages[-1]["content"]))
        self.user_events.append(user_event(len(self.messages), decision))
        self.messages.append(text_message("user", text))
        self.user_view.append(text_message("assistant", text))

    def verdict(self) -> Verdict:
        """The state oracle's label of the conversation so far."""
        return label(self.domain, self.situation, self.sandbox.events, self.sandbox.snapshot(), self.messages,
                     self.user_events)

    def final_text(self) -> str:
        """The agent's last text turn ('' when it has said nothing)."""
        return next((m["content"] for m in reversed(self.messages) if m["role"] == "assistant" and m["content"]), "")

    def tool_events(self) -> list[dict[str, Any]]:
        """The world's events as rollout-row records (arguments as JSON text, the agent turn that made each)."""
        turns = tool_turns(self.messages)
        return [{"index": e.index, "tool": e.tool, "arguments": json.dumps(e.arguments, sort_keys=True),
                 "status": e.status, "entity_id": e.entity_id, "applied": e.applied,
                 "turn": turns[e.index] if e.index < len(turns) else None,
                 "error": e.result.get("error") if e.status == "rejected" else None,
                 # the argument a rejection is about, or the path of the value a not_found names nothing with
                 "field": _rejected_field(e.result) if e.status == "rejected" else e.result.get("path")}
                for e in self.sandbox.events]
