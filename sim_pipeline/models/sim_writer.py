"""The embedded situation writer (`sim/writer`): writes a user's opening message for a situation card.

It draws a greeting, a stance template, the order of the facts and how each fact is said, each uniformly and
seeded per card, and returns the exact log-probability of the draw (the sum of the log of each choice's 1/n).
An online writer (any litellm model) receives the same prompt and card and writes freely.
"""

from __future__ import annotations

import math
from typing import Any

from sim_pipeline.models.cards import find_card
from sim_pipeline.models.conversation import tokens, transcript_digest
from sim_pipeline.models.phrasing import HISTORY_LINES, OPENINGS, said_value, words
from sim_pipeline.seeding import rng

GREETINGS = ("", "Hi there. ", "Hello, ", "Good morning! ", "Hey, ")
FACT_STYLES = ("My {name} is {value}.", "{Name}: {value}.", "For reference, my {name} is {value}.")


class SimWriter:
    """Writes varied openings: different words for the same situation, so the agent is tested on phrasing."""

    def respond(self, messages: list[dict[str, Any]], *, temperature: float, seed: int) -> tuple[str, float]:
        """(opening message, its log-probability)."""
        card = find_card(messages, "writer") or {}
        gen = rng(seed, "writer", transcript_digest(messages))
        logp = 0.0

        def choose(n: int) -> int:
            nonlocal logp
            logp -= math.log(n)
            return 0 if temperature <= 0 else int(gen.integers(n))

        stance = card.get("stance", "ordinary")
        templates = OPENINGS.get(stance, OPENINGS["ordinary"])
        greeting = GREETINGS[choose(len(GREETINGS))]
        template = templates[choose(len(templates))]
        facts = list((card.get("facts") or {}).items())
        order = list(range(len(facts)))
        if len(facts) > 1:
            logp -= math.log(math.factorial(len(facts)))
            order = list(range(len(facts))) if temperature <= 0 else list(gen.permutation(len(facts)))
        said = []
        for index in order:
            name, value = facts[int(index)]
            style = FACT_STYLES[choose(len(FACT_STYLES))]
            said.append(style.format(name=words(name), Name=words(name).capitalize(), value=said_value(value)))
        request = card.get("request") or "get some help"
        body = template.format(request=request, noun=card.get("noun", "account"), facts=" ".join(said)).strip()
        first = body[0] if greeting.endswith(", ") else body[0].upper()  # "Hello, could..." / "Hi there. Could..."
        text = HISTORY_LINES.get(card.get("history", "fresh"), "") + greeting + first + body[1:]
        return " ".join(text.split()), logp


def writer_tokens(text: str) -> int:
    """Token count of a written opening."""
    return len(tokens(text))
