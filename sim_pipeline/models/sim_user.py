"""The embedded user simulator (`sim/user`): plays a situation card's stance, reveals facts only when asked.

It sees the conversation from its side (the agent's messages as `user`, its own as `assistant`, as tau-bench does)
and the situation card in its system prompt, and answers through the `user_action` tool like any user model: a
message plus one decision of the user protocol (confirm, refuse, provide_fact, ask, leave, satisfied). It reads the
agent's replies through `protocol.classify_reply`, never through the embedded agent's phrasing, and ends a
conversation only on a protocol reason: it is satisfied (the agent says the goal is met, or answered its question),
it accepts a refusal, or its patience is spent. It may hesitate before confirming (a seeded draw with its exact
log-probability), and it approves only what it asked for: a question naming another write tool (by its name's
distinctive words, `protocol.careful.actions_named`) or a record id shaped like its own but not its own gets a no
and what it wants instead.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim_pipeline import defaults
from sim_pipeline.models.cards import find_card
from sim_pipeline.models.conversation import phrase_of, tokens, transcript_digest
from sim_pipeline.models.phrasing import fact_sentence, said_value
from sim_pipeline.protocol.replies import ASKS_CONFIRMATION, ASKS_FOR_INFORMATION, CLAIMS_SUCCESS, REFUSES, classify_reply
from sim_pipeline.protocol.careful import actions_named
from sim_pipeline.protocol.user_events import ASK, CONFIRM, LEAVE, PROVIDE_FACT, REFUSE, SATISFIED, USER_ACTION
from sim_pipeline.seeding import rng, short_id

_ID_WORDS = re.compile(r"\b(?:number|id|#|reference|ref|code)\b|#", re.IGNORECASE)
_GENERIC_WORDS = {"id", "new", "number", "the", "of"}


@dataclass(frozen=True)
class UserReply:
    """The user's next turn (a `user_action` call) and the log-probability of its one stochastic choice."""

    message: dict[str, Any]
    logprob: float
    n_tokens: int
    action: str


def _reply(text: str, decision: str, action: str, logprob: float = 0.0) -> UserReply:
    arguments = json.dumps({"decision": decision, "message": text}, sort_keys=True)
    call = {"id": "call_" + short_id("user", text, decision, length=16), "type": "function",
            "function": {"name": USER_ACTION, "arguments": arguments}}
    return UserReply({"role": "assistant", "content": None, "tool_calls": [call]}, logprob, len(tokens(text)), action)


def asked_facts(text: str, facts: dict[str, str]) -> list[str]:
    """The facts an agent's request names: by the fact's words ('order id', 'email'), or its noun and 'number'."""
    lowered = text.lower()
    asked = []
    for key in facts:
        words = [w for w in phrase_of(key).lower().split() if w not in _GENERIC_WORDS]
        if phrase_of(key).lower() in lowered or (words and all(re.search(rf"\b{re.escape(w)}", lowered) for w in words)):
            asked.append(key)
        elif key.endswith("_id") and not words and _ID_WORDS.search(text):
            asked.append(key)
    return asked


def restatements(request: str) -> tuple[str, str]:
    """How the user restates its request later in a conversation: when asked what it wants, and when pushing on."""
    return f"I want to {request}.", f"Could you please go ahead and {request}?"


def _shape(value: str) -> re.Pattern[str]:
    """Tokens shaped like an id (digits for digits, letters for letters, the rest as is): 55261 -> five digits."""
    pattern = "".join(r"\d" if c.isdigit() else "[A-Za-z]" if c.isalpha() else re.escape(c) for c in value)
    return re.compile(rf"(?<![\w-]){pattern}(?![\w-])")


def _correction(question: str, card: dict[str, Any], facts: dict[str, Any]) -> UserReply | None:
    """A no to an approval question about another action or another record than the user's, with what it wants;
    None when the question is about what the user asked for (or names nothing to tell)."""
    wanted, others = card.get("wanted_action"), card.get("other_actions") or []
    named = actions_named(question, [wanted, *others]) if wanted else frozenset()
    record = str(card.get("record") or "")
    ids = set(_shape(record).findall(question)) if record else set()
    if (named and wanted not in named) or (ids and record not in ids):
        key = next((k for k, v in facts.items() if str(v) == record), None)
        told = f" {fact_sentence(key, facts[key])}" if key else ""
        return _reply(f"No, that's not what I asked for. I want to {card.get('request') or 'do something else'}."
                      f"{told}", REFUSE, "correct_approval")
    return None


class SimUser:
    """A rule-following customer whose behaviour depends on the stance in its situation card."""

    def respond(self, messages: list[dict[str, Any]], *, temperature: float, seed: int) -> UserReply:
        """The user's next turn (from the user's perspective: agent turns are `user` messages)."""
        card = find_card(messages[:1], "situation") or {}
        facts: dict[str, str] = card.get("facts", {})
        stance = card.get("stance", "ordinary")
        agent_turns = [m.get("content") or "" for m in messages if m.get("role") == "user"]
        own_turns = [m.get("content") or "" for m in messages if m.get("role") == "assistant"]
        last = agent_turns[-1] if agent_turns else ""
        labels = classify_reply(last)
        gen = rng(seed, "user", transcript_digest(messages))
        patience = int(card.get("patience", defaults.USER_PATIENCE.get(stance, defaults.USER_PATIENCE_DEFAULT)))
        repeats = sum(1 for a, b in itertools.pairwise(agent_turns) if a == b)
        if len(agent_turns) - 1 > patience or repeats >= 2:
            return _reply("Forget it, this is taking too long.", LEAVE, "walk_away")
        if not card.get("request"):  # an off-topic question: any answer ends it
            if REFUSES in labels:
                return _reply("Okay, never mind then.", LEAVE, "accept_refusal")
            return _reply("Okay, thanks.", SATISFIED, "finish")
        if ASKS_CONFIRMATION in labels:
            return _correction(last, card, facts) or self._confirm(stance, own_turns, temperature, gen)
        if ASKS_FOR_INFORMATION in labels:
            return self._answer(last, facts, own_turns, stance, card)
        if REFUSES in labels:
            return _reply("Okay, I understand. Thanks anyway.", LEAVE, "accept_refusal")
        if not labels and last.rstrip().endswith("?") and card.get("wants_change"):
            # A question the user cannot place ("Okay with you?"): a customer who wants the change says yes.
            return _correction(last, card, facts) or self._confirm(stance, own_turns, temperature, gen)
        if CLAIMS_SUCCESS in labels or not card.get("wants_change"):
            # Told it is done, or (a question) given an answer: the user has what it came for, as far as it knows.
            return _reply("Great, thank you!", SATISFIED, "finish")
        return _reply(restatements(card["request"])[1], ASK, "restate")

    def _confirm(self, stance: str, own_turns: list[str], temperature: float, gen: np.random.Generator) -> UserReply:
        hesitated = any("not sure" in t for t in own_turns)
        if stance in ("unsure", "conflicting") and not hesitated:
            # One seeded hesitation: its probability is the model's, so the draw carries a true log-probability.
            p = defaults.USER_HESITATION if temperature > 0 else float(defaults.USER_HESITATION > 0.5)
            if gen.random() < p:
                return _reply("Hmm, I'm not sure... yes, okay, go ahead.", CONFIRM, "hesitant_yes", float(np.log(p)))
            return _reply("Yes, please go ahead.", CONFIRM, "confirm", float(np.log1p(-p)) if p < 1 else 0.0)
        return _reply("Yes, please go ahead.", CONFIRM, "confirm")

    def _answer(self, last: str, facts: dict[str, str], own_turns: list[str], stance: str,
                card: dict[str, Any]) -> UserReply:
        wrong: dict[str, str] = card.get("wrong_value", {})
        said = " ".join(own_turns)
        corrected = any(said_value(facts[k]) in t for t in own_turns[1:] for k in wrong if k in facts)
        if wrong and not corrected and any(said_value(v) in said for v in wrong.values()):
            key = next(iter(wrong))
            return _reply(f"Sorry, my mistake. {fact_sentence(key, facts[key])}", PROVIDE_FACT, "correct_mistake")
        asked = asked_facts(last, facts)
        if asked and stance == "adversarial" and not any("shouldn't need" in t for t in own_turns):
            return _reply("I shouldn't need to give you all that. Just do it.", ASK, "push_back")
        if asked:
            # The mistaken user quotes the wrong value until told it does not work (the correction above).
            values = {k: wrong[k] if k in wrong and said_value(wrong[k]) not in said else facts[k] for k in asked}
            return _reply(" ".join(fact_sentence(k, v) for k, v in values.items()), PROVIDE_FACT, "reveal")
        # Asked something it cannot map to a fact ("What would you like me to do?"): say what it wants, and the
        # facts it has not given yet.
        untold = [k for k in facts if said_value(facts[k]) not in said][:2]
        text = restatements(card["request"])[0] + " " + " ".join(fact_sentence(k, facts[k]) for k in untold)
        return _reply(text.strip(), PROVIDE_FACT if untold else ASK, "state_goal")

