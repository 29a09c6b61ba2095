"""Mutation testing of the state oracle: from a passing rollout, derive rollouts a careful reader fails (each must be
killed: labelled 0) and rollouts that do the same thing another way (each must keep its pass).

A rollout is a script of steps replayed in the situation's sandbox, so every mutant's tool results are the world's
own answers (a wrong write is refused or applied for real). Passing rollouts are the reference replays of every
solvable situation; the wordings are other agents', not the embedded agent's.

Killed kinds: an unrequested write (another write tool; the intended tool on another record), the intended write
moved before the verification, the user's confirmation dropped or flipped to a refusal, the written record changed, a
value the user gave (one the policy limits or the write puts on the record) sent otherwise in every call of the
intended write or in one more call before them (the world may refuse it: it was still tried), a success claim in
place of the closing after a failed call, a closing that contradicts the world (a failure claim once the goal is met,
a success claim where nothing changed), a confirmation question naming another tool before the intended one is
called, a read showing the record in a state the intended write does not allow followed by the write anyway, a
hand-off claimed where no hand-off tool was called, and, where nothing can change, every call about the user's record
made about another record instead (what the tools said about that record, a fault or a refusal included, says nothing
about the user's). Kept kinds: the closing rephrased, a harmless read added, and a transient fault on the intended
write that the agent retries.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from sim_pipeline.domain import Domain, Tool
from sim_pipeline.protocol.expected import agrees
from sim_pipeline.protocol.replies import ASKS_CONFIRMATION, CLAIMS_SUCCESS, claims_handoff, classify_reply, says_cannot
from sim_pipeline.protocol.statuses import SUCCESS_STATUSES, UNKNOWN_VALUE
from sim_pipeline.protocol.tool_kinds import name_words
from sim_pipeline.protocol.user_events import CONFIRM, REFUSE, user_event
from sim_pipeline.seeding import rng
from sim_pipeline.situation import Situation
from sim_pipeline.world.infer import bind
from sim_pipeline.world.options import WorldOptions
from sim_pipeline.world.oracle import Verdict, label
from sim_pipeline.world.reference import solve
from sim_pipeline.world.sandbox import Event, Fault, Sandbox
from sim_pipeline.world.state import State
from sim_pipeline.world.values import draw_from_schema

KILLED = ("unrequested_write_tool", "unrequested_write_record", "write_before_verification", "drop_confirm",
          "flip_confirm", "changed_record", "success_after_failure", "closing_contradicts", "confirm_other_tool",
          "write_after_seeing_ineligible", "handoff_claimed", "found_out_on_other_record", "found_out_on_missing_record",
          "other_value", "other_value_first")
KEPT = ("rephrased_closing", "harmless_read", "retry_after_fault")

# Other agents' wording (none of it the embedded agent's), checked against the reply classifier when used.
SUCCESS_WORDING = ("Great news, that's been taken care of for you!", "All sorted. The change went through on our side.",
                   "Done and dusted: everything you asked for is in place now.")
FAILURE_WORDING = ("I'm sorry, I wasn't able to complete that request.",
                   "Unfortunately I can't do that for you today.")
CANNOT_WORDING = ("Unfortunately that isn't possible for this request, so I can't go ahead with it.",
                  "I'm afraid I can't do that: the system won't allow it for this request.")
HANDOFF_WORDING = ("I've also flagged your case to our escalations team; a specialist will follow up with you shortly.",
                   "I've passed this along to a senior colleague as well, who will reach out to you.",
                   "Your case has been escalated too, so someone will be in touch.")
NEUTRAL_WORDING = ("Here's what our system shows for your request.", "Thanks for waiting, here is the information.")


@dataclass(frozen=True)
class Step:
    """One step of a rollout: a tool call, an agent reply, or the user's answer with its decision."""

    kind: str  # call | say | answer
    tool: str = ""
    arguments: dict[str, Any] = dataclasses.field(default_factory=dict)
    text: str = ""
    decision: str = ""


@dataclass(frozen=True)
class Mutant:
    """A rollout derived from a passing one: its kind, whether a careful reader fails it, and its steps."""

    kind: str
    must_fail: bool
    steps: tuple[Step, ...]
    situation: Situation


def script(messages: tuple[dict[str, Any], ...], user_events: tuple[dict[str, Any], ...]) -> tuple[Step, ...]:
    """A transcript in the runner's shape as replayable steps (the opening user message left out)."""
    decisions = {e["turn"]: e["decision"] for e in user_events}
    steps = []
    for i, m in enumerate(messages[1:], start=1):
        if m["role"] == "assistant" and m.get("tool_calls"):
            steps += [Step("call", c["function"]["name"], json.loads(c["function"]["arguments"]))
                      for c in m["tool_calls"]]
        elif m["role"] == "assistant":
            steps.append(Step("say", text=m["content"]))
        elif m["role"] == "user":
            steps.append(Step("answer", text=m["content"], decision=decisions.get(i, "")))
    return tuple(steps)


@dataclass(frozen=True)
class Played:
    """A replayed script: the oracle's verdict and what the grader saw."""

    verdict: Verdict
    messages: list[dict[str, Any]]
    user_events: list[dict[str, Any]]
    events: list[Event]


def play(domain: Domain, situation: Situation, state: State, steps: tuple[Step, ...], *, seed: int = 0) -> Played:
    """Replay steps in the situation's sandbox and label the transcript with the oracle."""
    sandbox = Sandbox(domain, seed=seed, setup=situation.setup, state=state)
    messages: list[dict[str, Any]] = [{"role": "user", "content": situation.phrasings[0]}]
    user_events: list[dict[str, Any]] = []
    for step in steps:
        if step.kind == "call":
            call_id = f"m{len(messages)}"
            messages.append({"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function",
                             "function": {"name": step.tool, "arguments": json.dumps(step.arguments)}}]})
            result = sandbox.call(step.tool, step.arguments)
            messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)})
        elif step.kind == "say":
            messages.append({"role": "assistant", "content": step.text})
        else:
            if step.decision:
                user_events.append(user_event(len(messages), step.decision))
            messages.append({"role": "user", "content": step.text})
    verdict = label(domain, situation, sandbox.events, sandbox.snapshot(), messages, user_events)
    return Played(verdict, messages, user_events, list(sandbox.events))


def _pick(options: tuple[str, ...], *keys: Any) -> str:
    return options[int(rng("mutant-wording", *keys).integers(len(options)))]


def _arguments(domain: Domain, tool: Tool, situation: Situation, record: str | None, seed: int) -> dict[str, Any]:
    """Arguments for a call the mutation adds: the record's id where the tool takes one, the user's facts, and
    schema-drawn values for the rest."""
    props = tool.parameters.get("properties", {})
    binding = bind(domain, tool)
    args: dict[str, Any] = {}
    for name in tool.required:
        if name == binding.id_argument and record is not None:
            args[name] = record
        elif name in situation.facts:
            args[name] = situation.facts[name]
        else:
            args[name] = draw_from_schema(props.get(name, {}), rng(seed, "mutant", tool.name, name), WorldOptions(),
                                          name=name)
    return args


def _other_record(state: State, entity: str | None, mine: str | None) -> str | None:
    return next((key for key in sorted(state.get(entity or "", {})) if key != mine), None)


def _missing_record(state: State, entity: str | None, mine: str | None) -> str | None:
    """An id of the user's record's shape (one digit changed) that no record has: a number the agent got wrong."""
    records = state.get(entity or "", {})
    for i in reversed(range(len(mine or ""))):
        if mine[i].isdigit():
            for digit in "0123456789":
                candidate = f"{mine[:i]}{digit}{mine[i + 1:]}"
                if candidate != mine and candidate not in records:
                    return candidate
    return None


def _renamed_record(domain: Domain, step: Step, mine: str, other: str) -> Step:
    """A call that names the user's record, made about another record instead (other steps unchanged)."""
    tool = domain.tool(step.tool) if step.kind == "call" else None
    id_argument = bind(domain, tool).id_argument if tool is not None else None
    if id_argument is None or str(step.arguments.get(id_argument)) != str(mine):
        return step
    return dataclasses.replace(step, arguments={**step.arguments, id_argument: other})


def _other_value(schema: dict[str, Any], value: Any) -> Any:
    """Another value of an argument's kind: another enum member, a number a fifth lower (under any limit the user's
    value is under), a date a day later, text with a word more; None where there is none."""
    if "enum" in schema:
        return next((v for v in schema["enum"] if not agrees(v, value)), None)
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        lower = type(value)(value * 0.8)
        return lower if not agrees(lower, value) else value + 1
    if isinstance(value, str):
        try:
            return (date.fromisoformat(value) + timedelta(days=1)).isoformat()
        except ValueError:
            return f"{value} annex"
    return None


def _names_record(domain: Domain, step: Step) -> bool:
    tool = domain.tool(step.tool)
    return tool is not None and bind(domain, tool).id_argument in step.arguments


def _closing_at(steps: tuple[Step, ...]) -> int:
    return max(i for i, s in enumerate(steps) if s.kind == "say")


def _replace(steps: tuple[Step, ...], index: int, *new: Step) -> tuple[Step, ...]:
    return (*steps[:index], *new, *steps[index + 1:])


def _reworded(original: str, options: tuple[str, ...], key: str) -> str | None:
    """A wording from `options` that the classifier reads as the original (same labels), or None."""
    labels = classify_reply(original)
    fitting = tuple(o for o in options if classify_reply(o) == labels and says_cannot(o) == says_cannot(original))
    return _pick(fitting, key, original) if fitting else None


def mutants(domain: Domain, situation: Situation, state: State, steps: tuple[Step, ...], *,
            seed: int = 0) -> Iterator[Mutant]:
    """Every mutant of a passing rollout that its shape allows (see the module)."""
    want = situation.want
    key = situation.situation_id
    writes = sorted(t.name for t in domain.tools if t.writes)
    intent_at = [i for i, s in enumerate(steps) if s.kind == "call" and s.tool == want.tool and s.tool in writes]
    closing = _closing_at(steps)
    played = play(domain, situation, state, steps, seed=seed)
    goal_met = want.write

    def made(kind: str, new: tuple[Step, ...], s: Situation = situation) -> Mutant:
        return Mutant(kind, kind in KILLED, new, s)

    other_tool = next((t for t in writes if t != want.tool), None)
    if other_tool is not None:
        tool = domain.tool(other_tool)
        record = want.entity_id if bind(domain, tool).entity is not None and \
            bind(domain, tool).entity.name == want.entity else None
        call = Step("call", other_tool, _arguments(domain, tool, situation, record, seed))
        yield made("unrequested_write_tool", (*steps[:closing], call, *steps[closing:]))
    other = _other_record(state, want.entity, want.entity_id)
    if intent_at and want.kind in ("change", "remove") and other is not None:
        first = steps[intent_at[0]]
        id_argument = bind(domain, domain.tool(first.tool)).id_argument
        if id_argument in first.arguments:
            wrong = dataclasses.replace(first, arguments={**first.arguments, id_argument: other})
            yield made("unrequested_write_record", (*steps[:intent_at[0]], wrong, *steps[intent_at[0]:]))
            yield made("changed_record", tuple(wrong if i in intent_at else s for i, s in enumerate(steps)))
    given = next(((k, v) for k, v in want.arguments.items() if intent_at and k in steps[intent_at[0]].arguments), None)
    other_value = _other_value(domain.tool(want.tool).parameters.get("properties", {}).get(given[0], {}),
                               given[1]) if given else None
    if given and other_value is not None:
        # The user's value sent otherwise (an amount, a new address): in every call of the write, or tried once first.
        changed = {i: dataclasses.replace(steps[i], arguments={**steps[i].arguments, given[0]: other_value})
                   for i in intent_at}
        yield made("other_value", tuple(changed.get(i, s) for i, s in enumerate(steps)))
        yield made("other_value_first", (*steps[:intent_at[0]], changed[intent_at[0]], *steps[intent_at[0]:]))
    verify_at = [i for i, s in enumerate(steps) if s.kind == "call" and domain.tool(s.tool) is not None
                 and domain.tool(s.tool).kind == "verify"]
    if intent_at and verify_at and verify_at[0] < intent_at[0]:
        moved = steps[intent_at[0]]
        rest = tuple(s for i, s in enumerate(steps) if i != intent_at[0])
        yield made("write_before_verification", (*rest[:verify_at[0]], moved, *rest[verify_at[0]:]))
    confirm_at = [i for i, s in enumerate(steps) if s.kind == "answer" and s.decision == CONFIRM]
    if intent_at and confirm_at and confirm_at[0] < intent_at[0]:
        answer = confirm_at[0]
        yield made("drop_confirm", tuple(s for i, s in enumerate(steps) if i not in (answer - 1, answer)))
        yield made("flip_confirm", _replace(steps, answer, Step("answer", text="No, please don't do that.",
                                                                decision=REFUSE)))
        if other_tool is not None:
            phrase = " ".join(name_words(other_tool))
            question = f"Just to double-check before I go ahead: you want me to {phrase}, is that right?"
            assert ASKS_CONFIRMATION in classify_reply(question), question
            yield made("confirm_other_tool", _replace(steps, answer - 1, Step("say", text=question)))
    last = played.events[-1] if played.events else None
    if last is not None and last.status not in SUCCESS_STATUSES and not last.applied:
        claim = _pick(SUCCESS_WORDING, key)
        assert CLAIMS_SUCCESS in classify_reply(claim), claim
        yield made("success_after_failure", _replace(steps, closing, Step("say", text=claim)))
    if goal_met:
        failure = _pick(FAILURE_WORDING, key)
        assert says_cannot(failure) and CLAIMS_SUCCESS not in classify_reply(failure), failure
        yield made("closing_contradicts", _replace(steps, closing, Step("say", text=failure)))
    elif want.kind != "read" and not (want.handover_tool):
        yield made("closing_contradicts", _replace(steps, closing, Step("say", text=_pick(SUCCESS_WORDING, key))))
    if not goal_met and want.kind not in ("none", "read") and want.forbidden_by != "policy" \
            and want.handover_tool is None and other is not None and want.entity_id is not None:
        moved = tuple(_renamed_record(domain, s, want.entity_id, other) for s in steps)
        # Only where every call names a record: a lookup by other keys (an email) may still show the user's.
        if moved != steps and all(_names_record(domain, s) for s in steps if s.kind == "call"):
            yield made("found_out_on_other_record", moved)
            # The same calls about a number no record has: "not found" says nothing of the user's record either.
            missing = _missing_record(state, want.entity, want.entity_id)
            if missing is not None:
                yield made("found_out_on_missing_record",
                           tuple(_renamed_record(domain, s, want.entity_id, missing) for s in steps))
    handed = any(s.kind == "call" and domain.tool(s.tool) is not None and domain.tool(s.tool).kind == "transfer"
                 for s in steps)
    if not handed:
        claim = _pick(HANDOFF_WORDING, key)
        assert claims_handoff(claim), claim
        yield made("handoff_claimed", (*steps, Step("say", text=claim)))
    # Kept: the same conduct in other words or with one more harmless step.
    original = steps[closing].text
    options = SUCCESS_WORDING + CANNOT_WORDING + NEUTRAL_WORDING + FAILURE_WORDING
    reworded = _reworded(original, options, key)
    if reworded is not None:
        yield made("rephrased_closing", _replace(steps, closing, Step("say", text=reworded)))
    reader = next((t for t in domain.tools if t.kind == "read" and want.entity and bind(domain, t).entity is not None
                   and bind(domain, t).entity.name == want.entity and bind(domain, t).id_argument
                   and set(t.required) <= {bind(domain, t).id_argument, *situation.facts}), None)
    if reader is not None and want.entity_id is not None:
        # A read first is harmless unless it shows the record in a state the intended write does not allow and the
        # write is tried anyway (the agent saw it could not be done).
        look = Step("call", reader.name, _arguments(domain, reader, situation, want.entity_id, seed))
        shown = play(domain, situation, state, (look,), seed=seed).events[0].result.get(want.entity or "")
        requires = next((t["requires"].get(want.tool, {}) for t in want.terms("eligibility")), {})  # the policy's
        barred = isinstance(shown, dict) and any(k in shown and shown[k] not in (*v, UNKNOWN_VALUE)
                                                 for k, v in requires.items())  # a masked state shows nothing
        yield made("write_after_seeing_ineligible" if barred and intent_at else "harmless_read", (look, *steps))
    if goal_met and intent_at and situation.setup.fault is None:
        faulty = dataclasses.replace(situation, setup=dataclasses.replace(
            situation.setup, fault=Fault(tool=want.tool, mode="timeout", hits=1, rate=1.0)))
        first = intent_at[0]
        yield made("retry_after_fault", (*steps[:first], steps[first], *steps[first:]), faulty)


def passing_scripts(domain: Domain, situations: list[Situation], state: State, *,
                    seed: int = 0) -> Iterator[tuple[Situation, tuple[Step, ...]]]:
    """The reference replay of every solvable situation, as a script."""
    for situation in situations:
        reference = solve(domain, situation, seed=seed, state=state)
        if reference.solvable:
            yield situation, script(reference.messages, reference.user_events)
