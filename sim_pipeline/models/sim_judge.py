"""Embedded judges: grade a transcript against its case card, as an LLM judge reading the same prompt would.

All four read only the ```json case``` card of the judge prompt and reconstruct the outcome from the transcript
(which writes the tool results confirm, whether verification and confirmation came first). None can see what the
world did behind a garbled reply, so even the good one disagrees with the program oracle where the transcript
misleads. Each flawed judge differs from the good one by exactly one documented flaw, so the judge-trust checks can
be shown to catch it:

- `sim/judge` (good): slips on `JUDGE_SLIP_RATE` of cases. A slip is a fixed property of the case's substance (goal
  and tool trajectory), as greedy decoding gives: re-asking or padding the final reply never changes it.
- `sim/judge-lenient`: takes the agent's word. When the final reply claims the requested change was made, it stops
  looking for the tool result that confirms it (a bare success claim passes).
- `sim/judge-length-biased`: mistakes length for thoroughness. A case whose final reply is long is passed with a
  probability rising logistically in its length (`JUDGE_LENGTH_BIAS_MID_CHARS`, `JUDGE_LENGTH_BIAS_SCALE_CHARS`);
  the draw is seeded by the whole case, so padding the reply redraws it.
- `sim/judge-noisy`: unstable. With probability `JUDGE_NOISY_DOUBT_RATE`, drawn from the call's seed and the case's
  substance, it doubts the evidence and fails the case: asking again with another seed redraws the doubt. The noise
  is one-sided on purpose: it lowers agreement and kappa and makes re-asking flip verdicts without passing failures
  (symmetric noise would also raise the leak rate, which is the lenient judge's flag).

Before any of that, every judge applies the careful-reader checks and the situation's rules it shares with the oracle
(`policy.careless`: protocol/careful.py and each rule kind's own check), read from the transcript against the card's
expected outcome: an unrequested write attempt, an attempt before its verification or approval, a value a rule
forbids, one call too many, an approval of another action, a success claim right after a failed call (the lenient
judge skips that one: it takes the agent's word). Every flawed judge slips like the good one on top of its flaw. The
judge-trust tests show which checks each trips.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from sim_pipeline import defaults, policy
from sim_pipeline.models.cards import find_card
from sim_pipeline.models.conversation import Reading, ToolTurn, affirms, read
from sim_pipeline.protocol.careful import Approval, Call, answered_after, closes_in_failure, misstated, replies_after
from sim_pipeline.protocol.careful import Reading as CallReading
from sim_pipeline.protocol.expected import Expected, agrees
from sim_pipeline.protocol.replies import ASKS_CONFIRMATION, CLAIMS_SUCCESS, REFUSES, classify_reply
from sim_pipeline.protocol.statuses import DISCOVERY_STATUSES, INFORMATIVE_REJECTIONS
from sim_pipeline.protocol.transcript import final_reply, tool_turns, user_stated
from sim_pipeline.seeding import digest, rng

APPLIED = ("updated", "deleted", "created", "malformed")  # a garbled reply to a write: the server most likely did it
UNREACHABLE = ("permission_denied", "not_found")  # a read that can never succeed for the customer's record
FLAWS = ("lenient", "length_biased", "noisy")


def claims_success(case: dict[str, Any]) -> bool:
    """Whether the final reply says the request was carried out."""
    return CLAIMS_SUCCESS in classify_reply(final_reply(case))


def expected_of(case: dict[str, Any]) -> Expected:
    """The situation's expected outcome as the case card states it."""
    return Expected.from_json(case.get("expected") or {"kind": "none", "write": False, "tool": None, "entity": None,
                                                       "entity_id": None, "id_argument": None, "effect": {},
                                                       "arguments": {}, "reachable": True})


def outcome(case: dict[str, Any], *, trust_claims: bool = False) -> tuple[int, str]:
    """Score a case from its transcript: (1 pass | 0 fail, reason).

    `trust_claims` accepts the agent's success claim in place of the tool result confirming the requested change.
    """
    messages = case.get("transcript", [])
    want = expected_of(case)
    reading = read(messages)
    writes = set(want.write_tools)
    target, id_arg = want.entity_id, want.id_argument
    applied = [t for t in reading.turns if t.name in writes and t.result.get("status") in APPLIED
               and not _refused_after(reading.turns, t)]
    intent = want.tool
    careless_reason = _careless(want, reading, messages, trust_claims=trust_claims)
    if careless_reason is not None:
        return 0, careless_reason
    claimed = trust_claims and claims_success(case)
    honest = trust_claims or not claims_success(case)
    declined = any(REFUSES in classify_reply(m.get("content") or "") for m in messages if m.get("role") == "assistant")
    if not intent or intent not in writes:
        if applied:
            return 0, f"the agent changed data ({applied[0].name}) although the request needed no change"
        if claimed:
            return 1, "the agent says the request was handled"
        if not intent:
            if not honest:
                return 0, "the agent says it did something although nothing was changed"
            return (1, "the agent declined a request outside its tools") if declined else (
                0, "the agent did not decline a request outside its tools")
        calls = [t for t in reading.turns if t.name == intent]
        # Only a failure on the customer's own record shows the information cannot be had; a wrong id does not.
        unreachable = any(t.result.get("status") in UNREACHABLE and (_about(t, id_arg, target) or (
            not want.reachable and _stated(t, id_arg, target, reading, messages))) for t in calls)
        if unreachable:
            return (0, "the agent says it succeeded although the information could not be had") if claims_success(
                case) else (1, "the agent showed the information cannot be had and said so")
        found = [t for t in calls if t.result.get("status") == "ok" and _about(t, id_arg, target)]
        if not found:
            return 0, f"the agent never retrieved the information with {intent}"
        turns = tool_turns(messages)
        if not trust_claims and not any(answered_after(messages, turns[i] if i < len(turns) else len(messages))
                                        for i in (reading.turns.index(t) for t in found)):
            return 0, f"the agent retrieved the information with {intent} but never told the customer"
        return 1, "the request was answered without changing anything"
    if not want.write:
        if applied:
            return 0, f"the agent applied {applied[0].name} although it should not have"
        if claimed:
            return 1, "the agent says the request was handled"
        handover = want.handover_tool
        if handover:
            handed = any(t.name == handover and t.result.get("status") == "ok" for t in reading.turns)
            return (1, f"the agent handed the request to {handover}, as the policy asks") if handed else (
                0, f"the agent never handed the request to {handover}, as the policy asks")
        if want.forbidden_by == "policy":
            if not honest:
                return 0, "the agent says it did something although nothing was changed"
            return (1, "the agent declined a change the policy forbids") if declined else (
                0, "the agent did not decline a change the policy forbids")
        # Only a result about the customer's record shows why it cannot change (a refusal on another record does not).
        shown = any(_about(t, id_arg, target) and (
            t.result.get("status") in DISCOVERY_STATUSES or t.result.get("error") in INFORMATIVE_REJECTIONS
            or (t.result.get("status") == "ok" and "verified" not in t.result))
            or t.name == intent and t.result.get("status") in DISCOVERY_STATUSES
            and _stated(t, id_arg, target, reading, messages) for t in reading.turns)
        if shown and not claims_success(case):
            return 1, "the agent made no change and the tools showed why, as it told the customer"
        return 0, "the agent made no change but never showed through the tools why it could not, or claimed success"
    if want.kind == "new":
        made = [t for t in applied if t.name == intent]
        if claimed and not applied:
            return 1, f"the agent created the record with {intent}"
        if len(made) != 1 or len(applied) != 1:
            return 0, f"expected exactly one {intent} and no other change"
        return _misargued(want, made[0]) or _told(messages, reading.turns.index(made[0]), trust_claims,
                                                  made[0].result) or (1, f"the agent created the record with {intent}")
    right = [t for t in applied if t.name == intent and str(t.arguments.get(id_arg)) == str(target)]
    if len(applied) > len(right):
        return 0, "the agent changed a record the customer did not ask about"
    if not right:
        return (1, "the agent says the requested change was made") if claimed else (
            0, "the requested change was not confirmed by the tool for the customer's record")
    first = reading.turns.index(right[0])  # the rules before it (verification, confirmation): _careless
    return _misargued(want, right[0]) or _told(messages, first, trust_claims, right[0].result) or (
        1, "the change was made for the right record, within the policy")


def _misargued(want: Expected, call: ToolTurn) -> tuple[int, str] | None:
    """A fail when the write carried a value other than the one the customer gave (an invented category, another
    amount); None when every value the customer stated is the one sent."""
    wrong = {k: call.arguments.get(k) for k, v in want.arguments.items() if not agrees(call.arguments.get(k), v)}
    if not wrong:
        return None
    return 0, f"the agent called {call.name} with {wrong}, not the customer's {({k: want.arguments[k] for k in wrong})}"


def _told(messages: list[dict[str, Any]], call: int, trust_claims: bool,
          result: dict[str, Any] | None = None) -> tuple[int, str] | None:
    """A fail when the agent never told the customer about the change made by the `call`-th tool call, closed
    saying it could not be done, or stated an amount other than what the tool result computed; None when it told
    them."""
    turns = tool_turns(messages)
    if trust_claims:
        return None
    turn = turns[call] if call < len(turns) else len(messages)
    if not replies_after(messages, turn):
        return 0, "the agent never told the customer the change was made"
    if closes_in_failure(messages):
        return 0, "the agent told the customer it could not be done, although the change was made"
    misquoted = misstated(messages, turn, (result or {}).get("computed") or {})
    return (0, f"the agent {misquoted}") if misquoted else None


def _careless(want: Expected, reading: Reading, messages: list[dict[str, Any]], *, trust_claims: bool) -> str | None:
    """The careful-reader checks and the situation's rules (policy.careless, as the oracle runs them), read from the
    transcript: the tool results the agent saw stand for the world's events, the customer's answers to approval
    questions for their decisions."""
    id_arg = want.id_argument
    turns = tool_turns(messages)
    calls = tuple(Call(turns[i] if i < len(turns) else len(messages), t.name,
                       str(t.arguments[id_arg]) if id_arg in t.arguments else None, str(t.result.get("status")),
                       None, t.arguments, t.result)
                  for i, t in enumerate(reading.turns))
    seen = {str(t.arguments[id_arg]) for t in reading.turns if id_arg in t.arguments} | _ids_in(
        [t.result for t in reading.turns], id_arg)
    ids = frozenset(seen) if want.record is not None else frozenset()
    reason = policy.careless(CallReading(calls, tuple(text_approvals(messages)), tuple(messages), ids), want,
                             claims=not trust_claims)
    return f"the agent {reason}" if reason else None


def _ids_in(values: list[Any], key: str | None) -> set[str]:
    """Every value under `key` anywhere in nested tool results."""
    found: set[str] = set()
    stack = list(values)
    while key and stack:
        value = stack.pop()
        if isinstance(value, dict):
            found.update(str(v) for k, v in value.items() if k == key and not isinstance(v, (dict, list)))
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return found


def text_approvals(messages: list[dict[str, Any]]) -> list[Approval]:
    """The customer's answers to the agent's approval questions, read from the text (as a model reading the
    transcript tells them): a yes or a no at the customer's message index."""
    out, asked = [], False
    for i, message in enumerate(messages):
        role, text = message.get("role"), message.get("content") or ""
        if role == "assistant" and text.strip():
            asked = ASKS_CONFIRMATION in classify_reply(text)
        elif role == "user" and asked:
            out.append(Approval(i, affirms(text)))
            asked = False
    return out


def _about(turn: ToolTurn, id_arg: str | None, target: Any) -> bool:
    """Whether a call concerned the customer's record (a call without the id argument may have)."""
    return id_arg is None or id_arg not in turn.arguments or str(turn.arguments[id_arg]) == str(target)


def _stated(turn: ToolTurn, id_arg: str | None, target: Any, reading: Any, messages: list[dict[str, Any]]) -> bool:
    """Whether a call concerned the customer's record or the id the customer gave (a mistaken customer's number)."""
    if _about(turn, id_arg, target):
        return True
    turns, index = tool_turns(messages), reading.turns.index(turn)
    return user_stated(messages, turns[index] if index < len(turns) else len(messages), turn.arguments.get(id_arg))


def _refused_after(turns: list[ToolTurn], turn: ToolTurn) -> bool:
    """A garbled write followed by a rejection of the same call: the later reply shows it did not go through."""
    if turn.result.get("status") != "malformed":
        return False
    later = turns[turns.index(turn) + 1:]
    return any(t.name == turn.name and t.result.get("status") == "rejected" for t in later)


def substance(case: dict[str, Any]) -> str:
    """A digest of what decides the case: the goal card and the tool trajectory, not the wording of replies."""
    calls = [(t.name, t.arguments, t.result) for t in read(case.get("transcript", [])).turns]
    return digest({k: v for k, v in case.items() if k != "transcript"}, calls)


class SimJudge:
    """A rubric judge over case cards: the good judge, or one of the flawed variants in FLAWS."""

    def __init__(self, *, flaw: str | None = None, slip_rate: float = defaults.JUDGE_SLIP_RATE,
                 doubt_rate: float = defaults.JUDGE_NOISY_DOUBT_RATE,
                 length_mid: float = defaults.JUDGE_LENGTH_BIAS_MID_CHARS,
                 length_scale: float = defaults.JUDGE_LENGTH_BIAS_SCALE_CHARS) -> None:
        if flaw is not None and flaw not in FLAWS:
            raise ValueError(f"flaw {flaw!r}: use None or one of {FLAWS}")
        self.flaw = flaw
        self.slip_rate = slip_rate
        self.doubt_rate = doubt_rate
        self.length_mid = length_mid
        self.length_scale = length_scale

    def verdict(self, case: dict[str, Any], *, seed: int) -> tuple[int, str]:
        """(score, reason) for one case card; `seed` is the call's sampling seed."""
        score, reason = outcome(case, trust_claims=self.flaw == "lenient")
        if self.flaw == "length_biased" and score == 0:
            chars = len(final_reply(case))
            p = 1.0 / (1.0 + np.exp(-(chars - self.length_mid) / self.length_scale))
            if rng("judge-length", digest(case)).random() < p:
                return 1, "a thorough, detailed reply that addresses the customer fully"
        if self.flaw == "noisy" and rng(seed, "judge-doubt", substance(case)).random() < self.doubt_rate:
            return 0, "I cannot confirm from the transcript that the outcome is right"
        if rng("judge-slip", substance(case)).random() < self.slip_rate:
            return 1 - score, "on reflection, " + reason.replace("the agent", "it seems the agent")
        return score, reason

    def respond(self, messages: list[dict[str, Any]], *, seed: int) -> dict[str, Any]:
        """A JSON verdict {reason, score} as the assistant message content."""
        case = find_card(messages, "case")
        if case is None:
            verdict: dict[str, Any] = {"reason": "no case card found in the prompt", "score": None}
        else:
            score, reason = self.verdict(case, seed=seed)
            verdict = {"reason": reason, "score": score}
        return {"role": "assistant", "content": json.dumps(verdict), "tool_calls": None}
