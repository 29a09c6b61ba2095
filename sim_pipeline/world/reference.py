"""Reference solutions: the calls that settle a situation, replayed in the sandbox and labelled by the oracle.

A situation is solvable when a correct agent can pass it. The reference plays that agent from what the user knows
(the situation's facts and the record id) and the situation's expected outcome: each rule binding the intended tool
takes its own step first (policy/: a verification, the user's `confirm` decision, also before a write the world will
refuse, since a guarded write is never tried first; a hand-off where the policy alone forbids the request), then it
calls the intended tool with the facts as arguments (or, when a verification failed, looks the record up instead),
retries a transient fault, and replies (reporting success, or declining and saying why). Where the policy alone
forbids the request and no rule hands it over, it declines without a call; where an identical record already
exists, it looks it up instead of making a second one. The same state oracle that labels rollouts labels the
replay; a reference that fails means the world cannot reach the situation's goal (an argument the facts cannot
fill or the schema refuses, a write the world turns down, a record that is not there) and every score over that
situation measures the world model, not the agent. The blocking `situations_solvable` check reads the verdicts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sim_pipeline import defaults, policy
from sim_pipeline.domain import Domain, Tool
from sim_pipeline.policy.kind import ReferenceStep
from sim_pipeline.protocol.expected import Expected
from sim_pipeline.protocol.statuses import FAULT_STATUSES, SUCCESS_STATUSES
from sim_pipeline.protocol.user_events import CONFIRM, user_event
from sim_pipeline.world.infer import bind
from sim_pipeline.seeding import rng
from sim_pipeline.world.options import WorldOptions
from sim_pipeline.world.oracle import NO_TOOL_REPLIES, label
from sim_pipeline.world.values import draw_from_schema
from sim_pipeline.world.sandbox import Sandbox
from sim_pipeline.world.state import State

if TYPE_CHECKING:
    from sim_pipeline.situation import Situation

DONE_REPLY = "All set: your request has been completed."  # what the reference says once the goal is met
CANNOT_REPLY = "I'm sorry, I can't do that: the system shows it cannot be done for this request."  # after a look-up
CONFIRM_QUESTION = "Before I go ahead, can you confirm you want me to do this?"


@dataclass(frozen=True)
class ReferenceResult:
    """A situation's reference replay: whether the oracle passed it, why, and the calls it made."""

    solvable: bool
    reason: str
    calls: tuple[tuple[str, str], ...]  # (tool, arguments as JSON) in call order
    messages: tuple[dict[str, Any], ...] = ()  # the replay's transcript, in the runner's shape
    user_events: tuple[dict[str, Any], ...] = ()  # the user's decisions in it


def _arguments(tool: Tool, facts: Mapping[str, Any], want: Expected, domain: Domain) -> dict[str, Any]:
    """What the user knows, as the tool's arguments: every fact the tool declares, and the record's id."""
    props = tool.parameters.get("properties", {})
    args = {k: v for k, v in facts.items() if k in props}
    binding = bind(domain, tool)
    if binding.id_argument and binding.id_argument not in args and want.entity_id and \
            binding.entity is not None and binding.entity.name == want.entity:
        args[binding.id_argument] = want.entity_id
    return {k: _typed(v, props.get(k, {})) for k, v in args.items()}


def _typed(value: Any, spec: Mapping[str, Any]) -> Any:
    """A fact (stored as text) in the type its argument declares, as a careful agent would send it."""
    kind = spec.get("type")
    try:
        if kind == "integer" and isinstance(value, str):
            return int(float(value))
        if kind == "number" and isinstance(value, str):
            return float(value)
        if kind == "boolean" and isinstance(value, str):
            return value.strip().lower() in ("true", "yes", "1")
        if kind in ("array", "object") and isinstance(value, str):
            return json.loads(value)
    except ValueError:
        return value
    return value


def _reader(domain: Domain, tool: Tool, facts: Mapping[str, Any]) -> Tool | None:
    """A read tool of the same entity whose required arguments the facts fill (to look before writing)."""
    entity = bind(domain, tool).entity
    return next((t for t in domain.tools if not t.writes and entity is not None and bind(domain, t).entity == entity
                 and t.required and all(a in facts for a in t.required)), None)


class _Replay:
    """A transcript in the runner's shape (a tool message per world event), built call by call."""

    def __init__(self, sandbox: Sandbox, opening: str) -> None:
        self.sandbox = sandbox
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": opening}]
        self.user_events: list[dict[str, Any]] = []

    def call(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        call_id = f"ref_{len(self.messages)}"
        text = json.dumps(args, sort_keys=True)
        self.messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": tool, "arguments": text}}]})
        result = self.sandbox.call(tool, args)
        self.messages.append({"role": "tool", "tool_call_id": call_id, "name": tool, "content": json.dumps(result)})
        return result

    def call_until_answered(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """Call, retrying while a scheduled fault answers (a persistent fault answers every time)."""
        result = self.call(tool, args)
        for _ in range(defaults.REFERENCE_MAX_RETRIES):
            if result["status"] not in FAULT_STATUSES or self.sandbox.events[-1].applied:
                break
            result = self.call(tool, args)
        return result

    def confirm(self) -> None:
        self.messages.append({"role": "assistant", "content": CONFIRM_QUESTION})
        self.user_events.append(user_event(len(self.messages), CONFIRM))
        self.messages.append({"role": "user", "content": "yes"})

    def say(self, text: str) -> None:
        self.messages.append({"role": "assistant", "content": text})


def _filled(domain: Domain, tool: Tool, situation: Situation, seed: int) -> dict[str, Any]:
    """What the user knows as the tool's arguments, with required ones they cannot know (a hand-off's summary)
    written from the schema."""
    args = _arguments(tool, situation.facts, situation.want, domain)
    for name in tool.required:
        args.setdefault(name, draw_from_schema(tool.parameters["properties"].get(name, {}),
                                               rng(seed, "reference", situation.situation_id, name),
                                               WorldOptions(), name=name))
    return args


def _look(replay: _Replay, domain: Domain, intent: Tool, situation: Situation, want: Expected) -> dict[str, Any] | None:
    """Read the user's record with a read tool the facts fill (None: no such tool)."""
    reader = _reader(domain, intent, situation.facts)
    return replay.call_until_answered(reader.name, _arguments(reader, situation.facts, want, domain)) if reader else None


def solve(domain: Domain, situation: Situation, *, seed: int, state: State) -> ReferenceResult:
    """Replay the situation's reference solution in its sandbox and label it with the state oracle."""
    want = situation.want
    sandbox = Sandbox(domain, seed=seed, setup=situation.setup, state=state)
    replay = _Replay(sandbox, situation.phrasings[0] if situation.phrasings else situation.goal)
    intent = domain.tool(want.tool) if want.tool else None
    if intent is None:
        replay.say(NO_TOOL_REPLIES[0])
    else:
        # Each rule's own step before the intended write is even tried (verify, confirm; a hand-off settles a
        # request the policy forbids): a careful agent never attempts a guarded write first, even one the world
        # will refuse. A verification that fails ends in a look-up instead.
        # A record that must not be made twice is looked up instead of written, where a read tool can find it; any
        # other write is tried, so it is verified and confirmed first.
        instead = _reader(domain, intent, situation.facts) if want.kind == "new" and not want.write else None
        step = ReferenceStep(
            want, writes=intent.writes and want.forbidden_by != "policy" and instead is None,
            call=lambda name, args: replay.call_until_answered(name, args),
            arguments=lambda name: _arguments(domain.tool(name), situation.facts, want, domain),
            fill=lambda name: _filled(domain, domain.tool(name), situation, seed), confirm=replay.confirm,
            look=lambda: _look(replay, domain, intent, situation, want), cannot=CANNOT_REPLY)
        for term in sorted(want.rules, key=lambda t: policy.KINDS[t["kind"]].order):
            policy.KINDS[term["kind"]].reference(term, step)
        if step.reply is not None:
            replay.say(step.reply)
        elif want.forbidden_by == "policy":
            replay.say(NO_TOOL_REPLIES[0])
        else:
            # A record that must not be made twice is looked up first, as a careful agent does (the world, like most
            # services, would accept the duplicate); a change the world forbids is tried, and must be refused.
            look = instead or (_reader(domain, intent, situation.facts) if not step.verified else None)
            tool = look or (intent if step.verified else None)
            if tool is not None:
                replay.call_until_answered(tool.name, _arguments(tool, situation.facts, want, domain))
            last = sandbox.events[-1] if sandbox.events else None
            answered = last is not None and (last.applied or last.status in SUCCESS_STATUSES)  # a garbled yes is a yes
            done = step.verified and answered and (want.write or want.kind == "read" and want.reachable)
            replay.say(DONE_REPLY if done else CANNOT_REPLY)  # the reference never claims what the world refused
    verdict = label(domain, situation, sandbox.events, sandbox.snapshot(), replay.messages, replay.user_events)
    calls = tuple((e.tool, json.dumps(e.arguments, sort_keys=True)) for e in sandbox.events)
    if sandbox.compute_errors:  # a price the world cannot work out: every score over it would measure the pack
        return ReferenceResult(False, sandbox.compute_errors[0], calls, tuple(replay.messages),
                               tuple(replay.user_events))
    return ReferenceResult(verdict.reward >= 1.0, verdict.reason, calls, tuple(replay.messages),
                           tuple(replay.user_events))
