"""The embedded user simulator (`sim/user`): plays a situation card's stance, reveals facts only when asked.

It sees the conversation from its side (the agent's messages as `user`, its own as `assistant`, as tau-bench does)
and the situation card in its system prompt. It may hesitate (a seeded draw with its exact log-probability) and
walks away when the agent wastes its patience.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim_pipeline import defaults
from sim_pipeline.models.cards import find_card
from sim_pipeline.models.conversation import CONFIRM_QUESTION, STOP, phrase_of, tokens, transcript_digest
from sim_pipeline.search.phrasing import fact_sentence
from sim_pipeline.seeding import rng

LEFT = "###LEFT###"  # the user walked away before the goal was met
_NOT_FOUND = re.compile(r"\b(couldn't find|could not find|no .* with id|not found|double-check)\b", re.IGNORECASE)
_ASK_INTENT = re.compile(r"what exactly would you like|how can i help|what would you like", re.IGNORECASE)


@dataclass(frozen=True)
class UserReply:
    """The user's next message and the log-probability of its one stochastic choice (0 when none)."""

    message: dict[str, Any]
    logprob: float
    n_tokens: int
    action: str


def _reply(text: str, action: str, logprob: float = 0.0) -> UserReply:
    return UserReply({"role": "assistant", "content": text, "tool_calls": None}, logprob, len(tokens(text)), action)


class SimUser:
    """A rule-following customer whose behaviour depends on the stance in its situation card."""

    def respond(self, messages: list[dict[str, Any]], *, temperature: float, seed: int) -> UserReply:
        """The user's next message (from the user's perspective: agent turns are `user` messages)."""
        card = find_card(messages[:1], "situation") or {}
        facts: dict[str, str] = card.get("facts", {})
        stance = card.get("stance", "ordinary")
        agent_turns = [m.get("content") or "" for m in messages if m.get("role") == "user"]
        own_turns = [m.get("content") or "" for m in messages if m.get("role") == "assistant"]
        last = agent_turns[-1] if agent_turns else ""
        gen = rng(seed, "user", transcript_digest(messages))
        patience = defaults.USER_PATIENCE.get(stance, defaults.USER_PATIENCE_DEFAULT)
        repeats = sum(1 for a, b in itertools.pairwise(agent_turns) if a == b)
        if len(agent_turns) - 1 > patience or repeats >= 2:
            return _reply(f"Forget it, this is taking too long. {LEFT}", "walk_away")
        if not card.get("request"):
            return _reply(f"Okay, never mind then. {STOP}", "finish")  # an off-topic question: any answer ends it
        if CONFIRM_QUESTION.search(last):
            return self._confirm(stance, own_turns, temperature, gen)
        wrong = card.get("wrong_value", {})
        corrected = any(str(v) in t for t in own_turns[1:] for k, v in facts.items() if k in wrong)
        if _NOT_FOUND.search(last) and wrong and not corrected:
            key = next(iter(wrong))
            return _reply(f"Sorry, my mistake. {fact_sentence(key, facts[key])}", "correct_mistake")
        if _ASK_INTENT.search(last):
            shown = {k: facts[k] for k in card.get("opening_facts", []) if k in facts}
            text = f"I want to {card.get('request', 'get help')}. " + " ".join(fact_sentence(k, v) for k, v in shown.items())
            return _reply(text.strip(), "state_goal")
        if "?" in last:
            return self._answer(last, facts, wrong, own_turns, stance, card)
        return _reply(f"Thanks, that's all. {STOP}", "finish")

    def _confirm(self, stance: str, own_turns: list[str], temperature: float, gen: np.random.Generator) -> UserReply:
        hesitated = any("not sure" in t for t in own_turns)
        if stance in ("unsure", "conflicting") and not hesitated:
            # One seeded hesitation: its probability is the model's, so the draw carries a true log-probability.
            p = defaults.USER_HESITATION if temperature > 0 else float(defaults.USER_HESITATION > 0.5)
            if gen.random() < p:
                return _reply("Hmm, I'm not sure... yes, okay, go ahead.", "hesitant_yes", float(np.log(p)))
            return _reply("Yes, please go ahead.", "confirm", float(np.log1p(-p)) if p < 1 else 0.0)
        return _reply("Yes, please go ahead.", "confirm")

    def _answer(self, last: str, facts: dict[str, str], wrong: dict[str, str], own_turns: list[str], stance: str,
                card: dict[str, Any]) -> UserReply:
        asked = [k for k in facts if phrase_of(k).lower() in last.lower()
                 or (k.endswith("_id") and re.search(r"\bwhich\b|\bnumber\b", last, re.IGNORECASE))]
        if not asked:
            return _reply("I'm not sure what you need from me. " + (
                f"I just want to {card['request']}." if card.get("request") else ""), "confused")
        if stance == "adversarial" and not any("shouldn't need" in t for t in own_turns):
            return _reply("I shouldn't need to give you all that. Just do it.", "push_back")
        said = []
        for key in asked:
            value = facts[key]
            first_time = not any(str(wrong.get(key, "\0")) in t for t in own_turns)
            if key in wrong and first_time:
                value = wrong[key]  # the mistaken user quotes the wrong value until told it does not work
            said.append(fact_sentence(key, value))
        return _reply(" ".join(said), "reveal")
