"""Cards: a fenced JSON block inside a prompt that any model can read and the embedded models parse.

A real LLM reads the prose around a card and the card itself; the embedded models read only the card, so one
prompt serves both without a side channel.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sim_pipeline.seeding import canonical_json


def render_card(label: str, payload: dict[str, Any]) -> str:
    """A fenced block ```json <label> ... ``` holding the payload."""
    return f"```json {label}\n{canonical_json(payload)}\n```"


def parse_card(text: str | None, label: str) -> dict[str, Any] | None:
    """The payload of the first card with this label in a text, or None."""
    match = re.search(rf"```json {re.escape(label)}\n(.*?)\n```", text or "", re.DOTALL)
    if not match:
        return None
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def find_card(messages: list[dict[str, Any]], label: str) -> dict[str, Any] | None:
    """The first card with this label in any message."""
    for message in messages:
        card = parse_card(message.get("content"), label)
        if card is not None:
            return card
    return None
