"""The structure of a transcript (OpenAI chat messages), read without reading anyone's wording.

The world answers every tool call with one `tool` message, in call order, so the i-th world event is the i-th tool
message: its index is the event's turn. The oracle and the conduct rules order world events, user decisions and
agent replies by these message indices.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sim_pipeline.protocol.replies import classify_reply
from sim_pipeline.protocol.user_events import CONFIRM, REFUSE


# Reasoning blocks an open model writes into its decoded text (Qwen3, DeepSeek-R1, ...): a trainer's decoded
# completion holds them, though the user never sees them. A template may open the block in the prompt, so the
# completion can start inside it (only the closing tag appears).
REASONING_TAGS = (("<think>", "</think>"),)
# A value shorter than this is not looked for in what the user said: "1" or "ok" match by coincidence.
MIN_STATED_LENGTH = 3


def visible_text(text: str) -> str:
    """What the user reads of a decoded reply: reasoning blocks removed (an unfinished one and all after it too)."""
    for opening, closing in REASONING_TAGS:
        if closing in text:
            text = text.rsplit(closing, 1)[1]
        if opening in text:
            text = text.split(opening, 1)[0]
    return text.strip()


def final_reply(case: Mapping[str, Any]) -> str:
    """The last assistant text of a case card's transcript ('' when the agent never wrote one)."""
    texts = [m.get("content") or "" for m in case.get("transcript", []) if m.get("role") == "assistant"]
    texts = [t for t in texts if t.strip()]
    return texts[-1] if texts else ""


def tool_turns(messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """The message index of every tool result, in order: the turn of each world event."""
    return [i for i, m in enumerate(messages) if m.get("role") == "tool"]


def replies(messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, str, frozenset[str]]]:
    """Every assistant text: (message index, text, classify_reply labels)."""
    return [(i, m["content"], classify_reply(m["content"])) for i, m in enumerate(messages)
            if m.get("role") == "assistant" and (m.get("content") or "").strip()]


def replied_after(messages: Sequence[Mapping[str, Any]], turn: int) -> bool:
    """Whether the agent wrote to the user after a message index."""
    return any(i > turn for i, _, _ in replies(messages))


def confirmed_before(user_events: Iterable[Mapping[str, Any]], turn: int) -> bool:
    """Whether the user's last approval decision before a message index was `confirm` (not `refuse`, not none)."""
    decisions = [e["decision"] for e in sorted(user_events, key=lambda e: e["turn"])
                 if e["turn"] < turn and e["decision"] in (CONFIRM, REFUSE)]
    return bool(decisions) and decisions[-1] == CONFIRM


def user_stated(messages: Sequence[Mapping[str, Any]], turn: int, value: Any) -> bool:
    """Whether the user said a value (an id, as a whole word) in a message before a message index."""
    said = str(value).strip() if value is not None else ""
    if len(said) < MIN_STATED_LENGTH:
        return False
    pattern = re.compile(rf"(?<![0-9A-Za-z]){re.escape(said)}(?![0-9A-Za-z])", re.IGNORECASE)
    return any(pattern.search(str(m.get("content") or "")) for m in messages[:turn] if m.get("role") == "user")
