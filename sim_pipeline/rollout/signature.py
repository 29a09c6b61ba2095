"""Behaviour signatures: a canonical hash of a trajectory's shape, for novelty search and SFT spread.

The shape is the sequence of (tool name, result status) pairs and how the conversation ended: with an action
(the last tool call succeeded and was reported), a question, a refusal, or a claim of success. Texts, ids and
argument values do not enter it, so two rollouts that behave alike share a signature.
"""

from __future__ import annotations

from typing import Any

from sim_pipeline.protocol.replies import (
    ASKS_CONFIRMATION,
    ASKS_FOR_INFORMATION,
    CLAIMS_SUCCESS,
    REFUSES,
    classify_reply,
)
from sim_pipeline.protocol.statuses import APPLIED_STATUSES
from sim_pipeline.seeding import short_id


def ending(final_text: str | None, last_status: str | None) -> str:
    """How a conversation ended (protocol.classify_reply of the final reply): question, refusal, claim, action or
    answer."""
    text = (final_text or "").strip()
    if not text:
        return "silent"
    labels = classify_reply(text)
    if ASKS_CONFIRMATION in labels or ASKS_FOR_INFORMATION in labels:
        return "question"
    if REFUSES in labels:
        return "refusal"
    if CLAIMS_SUCCESS in labels:
        return "action" if last_status in APPLIED_STATUSES else "claim"
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
