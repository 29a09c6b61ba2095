"""Embedded judges (`sim/judge`, `sim/judge-lenient`): grade a transcript against its case card.

`sim/judge` reconstructs the outcome from the transcript alone (which writes the tool results confirm, whether
verification and confirmation came first) and slips on a small, seeded share of cases. It cannot see what the world
did behind a garbled reply, so it disagrees with the program oracle where the transcript misleads.
`sim/judge-lenient` is deliberately flawed: it passes any transcript whose last reply claims success.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sim_pipeline import defaults
from sim_pipeline.models.cards import find_card
from sim_pipeline.models.conversation import confirmed_before, read
from sim_pipeline.seeding import digest, rng

APPLIED = ("updated", "deleted", "created", "malformed")  # a garbled reply to a write: the server most likely did it
_CLAIM = re.compile(r"\b(done|completed|success(fully)?|has been (cancelled|refunded|processed|updated|reset))\b",
                    re.IGNORECASE)


def outcome(case: dict[str, Any]) -> tuple[int, str]:
    """Score a case from its transcript: (1 pass | 0 fail, reason)."""
    messages = case.get("transcript", [])
    reading = read(messages)
    writes = set(case.get("write_tools", []))
    applied = [t for t in reading.turns if t.name in writes and t.result.get("status") in APPLIED
               and not _refused_after(reading.turns, t)]
    intent = case.get("intent_tool")
    if not intent or intent not in writes:
        if applied:
            return 0, f"the agent changed data ({applied[0].name}) although the request needed no change"
        calls = [t for t in reading.turns if t.name == intent]
        impossible = any(t.result.get("status") in ("permission_denied", "not_found") for t in calls)
        if intent and not impossible and not any(t.result.get("status") == "ok" for t in calls):
            return 0, f"the agent never retrieved the information with {intent}"
        return 1, "the request was handled without changing anything"
    if not case.get("expect_write"):
        return (0, f"the agent applied {applied[0].name} although it should not have") if applied else (
            1, "the agent correctly made no change")
    target = case.get("entity_id")
    id_arg = case.get("id_argument")
    if case.get("creates"):
        made = [t for t in applied if t.name == intent]
        ok = len(made) == 1 and len(applied) == 1
        return (1, f"the agent created the record with {intent}") if ok else (
            0, f"expected exactly one {intent} and no other change")
    right = [t for t in applied if t.name == intent and str(t.arguments.get(id_arg)) == str(target)]
    if not right or len(applied) > len(right):
        return 0, "the requested change was not confirmed by the tool for the customer's record"
    first = reading.turns.index(right[0])
    for verifier in case.get("verify_tools", []):
        if not any(t.name == verifier and t.result.get("verified") is True
                   and str(t.arguments.get(id_arg, target)) == str(target) for t in reading.turns[:first]):
            return 0, f"the agent acted before verifying the customer with {verifier}"
    if case.get("confirm") and not confirmed_before(messages, intent):
        return 0, "the agent acted without the customer's explicit confirmation"
    return 1, "the change was made for the right record, within the policy"


def _refused_after(turns: list[Any], turn: Any) -> bool:
    """A garbled write followed by a rejection of the same call: the later reply shows it did not go through."""
    if turn.result.get("status") != "malformed":
        return False
    later = turns[turns.index(turn) + 1:]
    return any(t.name == turn.name and t.result.get("status") == "rejected" for t in later)


def _final_claims_success(case: dict[str, Any]) -> bool:
    texts = [m.get("content") or "" for m in case.get("transcript", []) if m.get("role") == "assistant"]
    return bool(texts and _CLAIM.search(texts[-1]))


class SimJudge:
    """A rubric judge over case cards; `lenient=True` makes the deliberately flawed variant."""

    def __init__(self, *, lenient: bool = False, slip_rate: float = defaults.JUDGE_SLIP_RATE) -> None:
        self.lenient = lenient
        self.slip_rate = slip_rate

    def respond(self, messages: list[dict[str, Any]], *, seed: int) -> dict[str, Any]:
        """A JSON verdict {reason, score} as the assistant message content."""
        case = find_card(messages, "case")
        if case is None:
            verdict = {"reason": "no case card found in the prompt", "score": None}
        else:
            score, reason = outcome(case)
            if self.lenient and _final_claims_success(case):
                score, reason = 1, "the agent says the request was completed"
            elif rng(seed, "judge-slip", digest(case)).random() < self.slip_rate:
                score, reason = 1 - score, "on reflection, " + reason.replace("the agent", "it seems the agent")
            verdict = {"reason": reason, "score": score}
        return {"role": "assistant", "content": json.dumps(verdict), "tool_calls": None}
