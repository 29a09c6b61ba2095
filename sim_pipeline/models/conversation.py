"""Reading a chat transcript: the facts said so far, the tool calls and results, confirmations, pressure.

The embedded models read conversations the way an LLM would have to: from the messages alone (what an agent's reply
does through protocol.classify_reply, like every other reader).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from sim_pipeline.protocol.replies import ASKS_CONFIRMATION, classify_reply
from sim_pipeline.seeding import digest

_TOKEN = re.compile(r"\w+|[^\w\s]")
_DECODER = json.JSONDecoder()
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_NUMBER = re.compile(r"\$?(\d+(?:\.\d+)?)")
_AFFIRM = re.compile(r"\b(yes|yeah|yep|go ahead|please do|confirm(ed)?|do it|proceed)\b", re.IGNORECASE)
_NEGATE = re.compile(r"\b(no|don't|do not|stop|cancel that|wait)\b", re.IGNORECASE)
_PRESSURE = re.compile(r"\b(ignore|override|skip|obliged|immediately|right now|manager told|bend the rules|"
                       r"without verification|asap|rush)\b", re.IGNORECASE)


def tokens(text: str | None) -> list[str]:
    """A word-and-punctuation tokenization used for token counts and overlap scores."""
    return _TOKEN.findall(text or "")


def phrase_of(name: str) -> str:
    """An argument name as words (order_id -> order id)."""
    return name.replace("_", " ")


def extract(text: str, name: str, schema: dict[str, Any]) -> tuple[Any, bool]:
    """The value a text gives for one argument and whether it was said explicitly ('my order id is 48213').

    A value recognised only by its shape (an email, a number matching the schema's pattern) is implicit: it fills
    a gap but never overrides something said explicitly (a zip code must not replace an order id).
    """
    if schema.get("type") in ("array", "object"):
        return _structured(text, name)
    said = re.search(rf"\b{re.escape(phrase_of(name))}\s+(?:is|:|=)\s+(.+?)(?:\.\s|\.$|,\s|;|\?|!|$)", text,
                     re.IGNORECASE)
    if said:
        return said.group(1).strip().strip("\"'"), True
    if "enum" in schema:
        lowered = text.lower()
        return next((v for v in schema["enum"] if phrase_of(str(v)).lower() in lowered), None), False
    if "email" in name or schema.get("format") == "email":
        found = _EMAIL.findall(text)
        return (found[-1] if found else None), False
    pattern = schema.get("pattern")
    if pattern:
        hits = [t for t in tokens(text) if re.fullmatch(pattern, t)]
        return (hits[-1] if hits else None), False
    return None, False


def _structured(text: str, name: str) -> tuple[Any, bool]:
    """A list or object the text gives as JSON after the argument's words ('my items is [{...}]'), parsed."""
    for match in re.finditer(rf"\b{re.escape(phrase_of(name))}\s+(?:is|are|:|=)\s+(?=[\[{{])", text, re.IGNORECASE):
        try:
            value, _ = _DECODER.raw_decode(text, match.end())
        except ValueError:
            continue
        if isinstance(value, (list, dict)):
            return value, True
    return None, False


def _content(message: dict[str, Any]) -> str:
    return message.get("content") or ""


@dataclass
class ToolTurn:
    """One tool call made in the conversation and the result it got."""

    name: str
    arguments: dict[str, Any]
    result: dict[str, Any]


@dataclass
class Reading:
    """What a transcript says, as the embedded models understand it."""

    user_texts: list[str] = field(default_factory=list)
    assistant_texts: list[str] = field(default_factory=list)
    turns: list[ToolTurn] = field(default_factory=list)
    last_role: str = ""
    confirmed: bool = False
    refused_confirmation: bool = False
    asked_confirmation: bool = False
    pressure: bool = False

    @property
    def last_turn(self) -> ToolTurn | None:
        """The tool call whose result is the last message, if the last message is a tool result."""
        return self.turns[-1] if self.last_role == "tool" and self.turns else None

    def calls_to(self, name: str) -> list[ToolTurn]:
        """Every call of one tool."""
        return [t for t in self.turns if t.name == name]


def read(messages: list[dict[str, Any]]) -> Reading:
    """Parse a chat transcript (OpenAI format) into a Reading."""
    out = Reading()
    pending: dict[str, ToolTurn] = {}
    for message in messages:
        role = message.get("role")
        if role == "user":
            text = _content(message)
            out.user_texts.append(text)
            out.pressure = out.pressure or bool(_PRESSURE.search(text))
            if out.asked_confirmation:
                # Only a reply to the latest confirmation question counts as consent.
                out.confirmed = bool(_AFFIRM.search(text)) and not bool(_NEGATE.search(text.split(".")[0]))
                out.refused_confirmation = not out.confirmed
                out.asked_confirmation = False
        elif role == "assistant":
            text = _content(message)
            if text:
                out.assistant_texts.append(text)
                out.asked_confirmation = ASKS_CONFIRMATION in classify_reply(text)
            for call in message.get("tool_calls") or []:
                fn = call.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                except (TypeError, ValueError):
                    args = {}
                turn = ToolTurn(fn.get("name", ""), args if isinstance(args, dict) else {}, {})
                pending[call.get("id", "")] = turn
                out.turns.append(turn)
        elif role == "tool":
            turn = pending.get(message.get("tool_call_id") or "")
            if turn is not None:
                try:
                    result = json.loads(_content(message))
                except ValueError:
                    result = {"status": "malformed", "raw": _content(message)}
                turn.result = result if isinstance(result, dict) else {"status": "malformed"}
        if role in ("user", "assistant", "tool"):
            out.last_role = role
    return out


def known_values(reading: Reading, properties: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Argument values the conversation grounds: said by the user (later corrections win) or returned by a tool."""
    known: dict[str, Any] = {}
    for turn in reading.turns:
        record = next((v for v in turn.result.values() if isinstance(v, dict)), None)
        for name in properties:
            if record is not None and name in record and record[name] not in (None, "unknown"):
                value = record[name]
                known[name] = value if isinstance(value, (list, dict)) else str(value)
    explicit: set[str] = set()
    for text in reading.user_texts:
        for name, schema in properties.items():
            value, said = extract(text, name, schema)
            if value is not None and (said or name not in explicit):
                known[name] = value
                if said:
                    explicit.add(name)
    return known


def confirmed_before(messages: list[dict[str, Any]], tool: str) -> bool:
    """Whether the user said yes to a confirmation question before the first call of `tool`, read from the text.

    How a model reading the transcript (the embedded judge) tells; the oracle and the conduct rules use the user's
    recorded decisions instead (protocol.transcript.confirmed_before).
    """
    asked, confirmed = False, False
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            if any((c.get("function") or {}).get("name") == tool for c in message.get("tool_calls") or []):
                return confirmed
            if message.get("content"):
                asked = ASKS_CONFIRMATION in classify_reply(message["content"])
        elif role == "user" and asked:
            text = message.get("content") or ""
            confirmed = bool(_AFFIRM.search(text)) and not bool(_NEGATE.search(text.split(".")[0]))
            asked = False
    return confirmed


def transcript_digest(messages: list[dict[str, Any]]) -> str:
    """A hash of what a transcript says, blind to how a client serialized it (missing vs None keys, extra fields).

    Seeds derive from it, so the same conversation draws the same sample through litellm and in-process.
    """
    canonical = []
    for m in messages:
        calls = [((c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"))
                 for c in m.get("tool_calls") or []]
        canonical.append((m.get("role"), m.get("content") or "", calls, m.get("tool_call_id") or ""))
    return digest(canonical)
