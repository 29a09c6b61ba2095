"""Behaviour signatures: a canonical hash of a trajectory's shape, for novelty search and SFT spread.

The shape is the sequence of (tool name, result status) pairs and how the conversation ended: with an action
(the last tool call succeeded and was reported), a question, a refusal, or a claim of success. Texts, ids and
argument values do not enter it, so two rollouts that behave alike share a signature.
"""

from __future__ import annotations

import re
from typing import Any

from sim_pipeline.models.conversation import SUCCESS_CLAIM
from sim_pipeline.seeding import short_id

_REFUSAL = re.compile(r"\b(sorry|can't|cannot|unable|not able|only help|not permitted|escalated)\b", re.IGNORECASE)


def ending(final_text: str | None, last_status: str | None) -> str:
    """How a conversation ended: question, refusal, claim, action or answer."""
    text = (final_text or "").strip()
    if not text:
        return "silent"
    if text.endswith("?"):
        return "question"
    if _REFUSAL.search(text):
        return "refusal"
    if SUCCESS_CLAIM.search(text):
        return "action" if last_status in ("updated", "deleted", "created") else "claim"
    return "answer"


def shape(steps: list[tuple[str, str]], final_text: str | None) -> list[Any]:
    """The canonical shape: [(tool, status)...] plus the ending."""
    last_status = steps[-1][1] if steps else None
    return [[list(s) for s in steps], ending(final_text, last_status)]


def behavior_signature(steps: list[tuple[str, str]], final_text: str | None) -> str:
    """A 12-hex-digit hash of the trajectory's shape."""
    return short_id("signature", shape(steps, final_text))


def describe(steps: list[tuple[str, str]], final_text: str | None) -> str:
    """The shape in words, e.g. 'get_order:ok > cancel_order:timeout | refusal'."""
    body = " > ".join(f"{t}:{s}" for t, s in steps) or "(no tools)"
    return f"{body} | {shape(steps, final_text)[1]}"
