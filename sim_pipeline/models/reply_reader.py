"""A model that reads an agent's replies: the registry's `reply_classifier`, for runs whose agent words things the
rules of protocol/replies.py were never tuned on.

What the graders must read from an agent's text (does it ask for approval, claim success, refuse, ask for a detail,
say the request cannot be done, say it handed the request over) is asked of any litellm model, one call per distinct
reply, through the gateway (so cached on disk, bounded and retried like every call), at temperature 0 with a JSON
schema as `response_format`
(structured output; a backend that does not take it still gets the schema in the prompt). An answer that is not that
JSON leaves the reply to the rules, and the count of such replies is reported, never hidden. `protocol.replies.read_by`
then makes the oracle and the conduct rules take these labels.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from sim_pipeline import defaults
from sim_pipeline.models.gateway import Gateway, ProviderError, Sampling
from sim_pipeline.protocol.replies import (
    ASKS_CONFIRMATION,
    ASKS_FOR_INFORMATION,
    CLAIMS_HANDOFF,
    CLAIMS_SUCCESS,
    REFUSES,
    SAYS_CANNOT,
)
from sim_pipeline.seeding import stable_int

FIELDS: dict[str, str] = {
    ASKS_CONFIRMATION: "it asks the customer to approve an action the agent is about to take (\"Shall I cancel it?\", "
                       "\"Please confirm and I'll proceed\")",
    CLAIMS_SUCCESS: "it says an action the customer asked for has been carried out (\"Your order has been cancelled\")",
    REFUSES: "it declines or gives up on the request, or hands it to someone else (\"I can't change that\", "
             "\"I've escalated it to a supervisor\")",
    ASKS_FOR_INFORMATION: "it asks for a fact, a choice or a clarification (\"Which order?\"); a question that only asks "
                          "for approval is not this",
    SAYS_CANNOT: "it says the request cannot be, or was not, done (not \"it was already done\", not \"I can't tell "
                 "whether it worked\")",
    CLAIMS_HANDOFF: "it says the agent passed the request to a person or a team, or is doing so (\"I've escalated it to "
                    "a supervisor\", \"I'm transferring you to billing\"); an offer, or asking the customer to contact "
                    "someone, is not this",
}
SCHEMA = {"type": "object", "additionalProperties": False, "required": list(FIELDS),
          "properties": {name: {"type": "boolean"} for name in FIELDS}}
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "reply_labels", "strict": True, "schema": SCHEMA}}
PROMPT = ("You read one message that a customer-support agent sent to a customer, and say what it does. Answer with "
          "JSON only, one boolean per key:\n{keys}\n\nThe message:\n<<<\n{text}\n>>>")


@dataclass(frozen=True)
class ReplyReading:
    """The labels a model gave each distinct reply, and the replies it could not read (left to the rules)."""

    model: str
    labels: dict[str, frozenset[str]] = field(default_factory=dict)
    unread: tuple[str, ...] = ()

    def summary(self) -> dict[str, object]:
        """What a run's metadata says of it."""
        return {"reply_classifier": self.model, "replies_read": len(self.labels),
                "replies_left_to_rules": len(self.unread)}


def prompt(text: str) -> list[dict[str, str]]:
    """The one message asked about a reply."""
    keys = "\n".join(f"- {name}: {meaning}" for name, meaning in FIELDS.items())
    return [{"role": "user", "content": PROMPT.format(keys=keys, text=text)}]


def parse(content: str | None) -> frozenset[str] | None:
    """The labels in a model's answer, or None when it is not the asked JSON (one boolean per key)."""
    text = (content or "").strip()
    start, end = text.find("{"), text.rfind("}")
    try:
        value = json.loads(text[start:end + 1]) if start >= 0 and end > start else None
    except ValueError:
        return None
    if not isinstance(value, dict) or any(not isinstance(value.get(k), bool) for k in FIELDS):
        return None
    return frozenset(k for k in FIELDS if value[k])


async def read_replies(gateway: Gateway, model: str, texts: Iterable[str]) -> ReplyReading:
    """Ask `model` about every distinct non-empty reply; auth and quota errors stop here, with the fix."""
    unique = sorted({t for t in texts if t and t.strip()})

    async def one(text: str) -> frozenset[str] | None:
        sampling = Sampling(0.0, 1.0, defaults.REPLY_READER_MAX_TOKENS, stable_int("reply-reader", text) % 2**31)
        try:  # an auth or quota error (ModelCallError) is not caught: every later call would fail the same way
            reply = await gateway.complete(model, prompt(text), sampling=sampling, logprobs=False,
                                           response_format=RESPONSE_FORMAT)
        except ProviderError:
            return None
        return parse(reply.message.get("content"))

    answers = await asyncio.gather(*(one(t) for t in unique))
    return ReplyReading(model, {t: a for t, a in zip(unique, answers) if a is not None},
                        tuple(t for t, a in zip(unique, answers) if a is None))


def assistant_texts(messages: Iterable[dict[str, object]]) -> list[str]:
    """The agent's texts in a transcript (what the graders read)."""
    return [str(m.get("content")) for m in messages if m.get("role") == "assistant" and m.get("content")]
